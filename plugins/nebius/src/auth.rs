//! Service-account authentication: the credentials JSON (a secret granted to
//! the plugin) signs a short-lived RS256 JWT, which the IAM token exchange
//! service trades for an access token. The token is kept in the host cache,
//! shared by every instance of the plugin, until shortly before it expires.

use base64::Engine;
use rsa::RsaPrivateKey;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{SignatureEncoding, Signer};
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;

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
    #[serde(rename = "private-key")]
    pub private_key: String,
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

/// The signed JWT for the exchange, issued at `now` (seconds since the epoch).
pub fn jwt(c: &SubjectCredentials, now: u64) -> Result<String, String> {
    let key = RsaPrivateKey::from_pkcs8_pem(&c.private_key)
        .or_else(|_| {
            use rsa::pkcs1::DecodeRsaPrivateKey;
            RsaPrivateKey::from_pkcs1_pem(&c.private_key)
        })
        .map_err(|e| format!("the credentials' private key does not parse: {e}"))?;
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
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = SigningKey::<Sha256>::new(key).sign(signing_input.as_bytes());
    Ok(format!("{signing_input}.{}", b64(&signature.to_bytes())))
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
    fn credentials_shape() {
        let c = parse(br#"{"subject-credentials":{"type":"JWT","alg":"RS256","private-key":"x","kid":"publickey-1","iss":"serviceaccount-1","sub":"serviceaccount-1"}}"#).expect("parses");
        assert_eq!(c.kid, "publickey-1");
        assert!(
            parse(
                br#"{"subject-credentials":{"alg":"ES256","private-key":"x","kid":"k","iss":"i"}}"#
            )
            .is_err()
        );
        assert!(jwt(&c, 0).is_err(), "a key that does not parse is an error");
    }
}
