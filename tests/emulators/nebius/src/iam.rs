//! The token exchange's side of service-account auth: a self-signed RS256
//! JWT is checked against the service account's public key (signature, kid,
//! issuer and subject, audience, lifetime) before a token is issued.

use base64::Engine;
use karpenter_plugin_nebius::auth;
use rsa::RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::Verifier;
use serde_json::Value;
use sha2::Sha256;

/// The service account the emulator knows.
#[derive(Clone, Debug)]
pub struct ServiceAccount {
    pub id: String,
    pub kid: String,
    pub public_key_pem: String,
}

impl ServiceAccount {
    /// The test credentials in `testdata/`.
    pub fn test() -> ServiceAccount {
        let creds: Value =
            serde_json::from_str(include_str!("../testdata/credentials.json")).unwrap_or_default();
        let field = |k: &str| {
            creds["subject-credentials"][k]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        ServiceAccount {
            id: field("iss"),
            kid: field("kid"),
            public_key_pem: include_str!("../testdata/public.pem").into(),
        }
    }
}

/// The test credentials file, as a secret the plugin is granted.
pub fn test_credentials() -> &'static [u8] {
    include_bytes!("../testdata/credentials.json")
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|e| format!("bad base64url: {e}"))
}

/// Why the JWT is refused, or Ok.
pub fn verify(jwt: &str, sa: &ServiceAccount, now: u64) -> Result<(), String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [h, c, sig] = parts.as_slice() else {
        return Err("not a JWT (three dot-separated parts)".into());
    };
    let header: Value =
        serde_json::from_slice(&b64(h)?).map_err(|e| format!("header is not JSON: {e}"))?;
    let claims: Value =
        serde_json::from_slice(&b64(c)?).map_err(|e| format!("claims are not JSON: {e}"))?;
    if header["alg"] != "RS256" {
        return Err(format!("alg {} is not RS256", header["alg"]));
    }
    if header["kid"] != sa.kid.as_str() {
        return Err(format!("unknown kid {}", header["kid"]));
    }
    let key = RsaPublicKey::from_public_key_pem(&sa.public_key_pem)
        .map_err(|e| format!("the emulator's public key: {e}"))?;
    let signature =
        Signature::try_from(b64(sig)?.as_slice()).map_err(|e| format!("signature: {e}"))?;
    VerifyingKey::<Sha256>::new(key)
        .verify(format!("{h}.{c}").as_bytes(), &signature)
        .map_err(|_| "the signature does not verify against the service account's key")?;
    if claims["iss"] != sa.id.as_str() || claims["sub"] != sa.id.as_str() {
        return Err(format!(
            "iss {} / sub {} is not {}",
            claims["iss"], claims["sub"], sa.id
        ));
    }
    if claims["aud"] != auth::AUDIENCE {
        return Err(format!("aud {} is not {}", claims["aud"], auth::AUDIENCE));
    }
    let exp = claims["exp"].as_u64().ok_or("no exp")?;
    let iat = claims["iat"].as_u64().ok_or("no iat")?;
    if exp <= now {
        return Err("the JWT expired".into());
    }
    if iat > now + 60 || exp.saturating_sub(iat) > 3600 {
        return Err("the JWT's lifetime is implausible".into());
    }
    Ok(())
}
