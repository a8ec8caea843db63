//! Service-account authentication: the key in the credentials JSON (a secret
//! granted to the plugin) signs a short-lived RS256 JWT, which the IAM token
//! exchange service trades for an access token. The host signs, with the key
//! where the secret holds it. The token is kept in the host cache, shared by
//! every instance of the plugin, until shortly before it expires.

use base64::Engine;
use serde::Deserialize;
use serde_json::json;

pub const AUDIENCE: &str = "token-service.iam.new.nebiuscloud.net";
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const SUBJECT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The self-signed JWT lives a minute: it is exchanged at once.
const JWT_TTL_SECONDS: u64 = 60;
/// A cached token is dropped this long before it expires.
pub const REFRESH_MARGIN_SECONDS: u64 = 300;

#[derive(Debug, Clone, Deserialize)]
pub struct File {
    #[serde(rename = "subject-credentials")]
    pub subject_credentials: SubjectCredentials,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SubjectCredentials {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub alg: String,
    pub kid: String,
    pub iss: String,
    #[serde(default)]
    pub sub: String,
}

pub fn parse(bytes: &[u8]) -> Result<SubjectCredentials, String> {
    let f: File = serde_json::from_slice(bytes)
        .map_err(|e| format!("the Nebius credentials are not the expected JSON: {e}"))?;
    let c = f.subject_credentials;
    if !c.alg.is_empty() && c.alg != "RS256" {
        return Err(format!(
            "credentials algorithm {} is not supported (RS256 is)",
            c.alg
        ));
    }
    if !c.type_.is_empty() && c.type_ != "JWT" {
        return Err(format!("credentials type {} is not JWT", c.type_));
    }
    Ok(c)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Where the credentials JSON holds the PEM private key (RFC 6901).
pub const PRIVATE_KEY_POINTER: &str = "/subject-credentials/private-key";

/// The JWT's header and claims, base64url-encoded and joined: what is signed.
pub fn signing_input(c: &SubjectCredentials, now: u64) -> String {
    let sub = if c.sub.is_empty() { &c.iss } else { &c.sub };
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": c.kid});
    let claims = json!({
        "iss": c.iss,
        "sub": sub,
        "aud": AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + JWT_TTL_SECONDS,
    });
    format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// The compact JWT: the signing input and its RS256 signature.
pub fn jwt(signing_input: &str, signature: &[u8]) -> String {
    format!("{signing_input}.{}", b64(signature))
}

/// Whether a `get-secret` error is the host's refusal of a secret this
/// plugin was not granted (`secret "<name>" is not granted to plugin <p>`),
/// rather than a granted secret that is missing or unreadable. The contract
/// reports both as text, so the wording is what tells them apart.
pub fn is_not_granted(error: &str) -> bool {
    error.contains("is not granted")
}

/// A cached token: `<expires-at>\n<token>`.
pub fn encode_cached(token: &str, expires_at: u64) -> Vec<u8> {
    format!("{expires_at}\n{token}").into_bytes()
}

/// The cached token if it is still good at `now`.
pub fn decode_cached(bytes: &[u8], now: u64) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (exp, token) = text.split_once('\n')?;
    let exp: u64 = exp.parse().ok()?;
    (now + REFRESH_MARGIN_SECONDS < exp).then(|| token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_expire_early() {
        let b = encode_cached("tok", 1000);
        assert_eq!(decode_cached(&b, 600).as_deref(), Some("tok"));
        assert_eq!(decode_cached(&b, 700), None);
        assert_eq!(decode_cached(b"junk", 0), None);
    }

    #[test]
    fn only_a_denial_means_not_granted() {
        assert!(is_not_granted(
            r#"secret "nebius-credentials/credentials.json" is not granted to plugin nebius"#
        ));
        assert!(!is_not_granted(
            "reading nebius-credentials/credentials.json: No such file or directory"
        ));
    }

    #[test]
    fn credentials_shape() {
        let c = parse(br#"{"subject-credentials":{"type":"JWT","alg":"RS256","private-key":"x","kid":"publickey-1","iss":"serviceaccount-1","sub":"serviceaccount-1"}}"#).expect("parses");
        assert_eq!(c.kid, "publickey-1");
        assert!(
            parse(
                br#"{"subject-credentials":{"alg":"ES256","private-key":"x","kid":"k","iss":"i"}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn the_signed_input_names_the_key_and_the_exchange() {
        let c = parse(br#"{"subject-credentials":{"private-key":"x","kid":"publickey-1","iss":"serviceaccount-1"}}"#).expect("parses");
        let input = signing_input(&c, 100);
        let (header, claims) = input.split_once('.').expect("two parts");
        let decode = |part: &str| -> serde_json::Value {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .expect("base64url");
            serde_json::from_slice(&bytes).expect("json")
        };
        assert_eq!(
            decode(header),
            json!({"alg": "RS256", "typ": "JWT", "kid": "publickey-1"})
        );
        let claims = decode(claims);
        assert_eq!(claims["sub"], "serviceaccount-1", "sub defaults to iss");
        assert_eq!(claims["aud"], AUDIENCE);
        assert_eq!(claims["exp"], 160);
        assert_eq!(jwt(&input, &[0xfb]), format!("{input}.-w"));
    }
}
