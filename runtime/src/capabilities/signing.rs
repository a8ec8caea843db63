//! `karpenter:provider/signing`: signatures by a private key in a granted
//! secret. The plugin names the key; the host reads, parses and uses it, so
//! no plugin has to carry RSA and its encoders in its own code.

use crate::bindings::v0_1_4::karpenter::provider::signing::{Algorithm, Host};
use crate::state::State;
use rsa::RsaPrivateKey;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{RandomizedSigner, SignatureEncoding};
use sha2::Sha256;

/// Messages are JWT signing inputs and the like, never bulk data.
const MAX_MESSAGE_BYTES: usize = 64 << 10;

/// The PEM text of the key: the whole secret, or the string at `pointer` in it.
fn key_pem(secret: &[u8], pointer: Option<&str>) -> Result<String, String> {
    match pointer {
        None => String::from_utf8(secret.to_vec()).map_err(|_| "it is not PEM text".to_string()),
        Some(pointer) => {
            let doc: serde_json::Value =
                serde_json::from_slice(secret).map_err(|e| format!("it is not JSON: {e}"))?;
            match doc.pointer(pointer) {
                Some(serde_json::Value::String(pem)) => Ok(pem.clone()),
                Some(_) => Err(format!("{pointer} is not a string")),
                None => Err(format!("it has nothing at {pointer}")),
            }
        }
    }
}

fn rsa_key(pem: &str) -> Result<RsaPrivateKey, String> {
    RsaPrivateKey::from_pkcs8_pem(pem)
        .or_else(|_| RsaPrivateKey::from_pkcs1_pem(pem))
        .map_err(|_| "it holds no RSA private key (PEM, PKCS#8 or PKCS#1)".to_string())
}

/// The signature of `message` by the key in `secret`, as the contract defines it.
pub fn sign(
    secret: &[u8],
    pointer: Option<&str>,
    algorithm: Algorithm,
    message: &[u8],
) -> Result<Vec<u8>, String> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "the message is {} bytes; at most {MAX_MESSAGE_BYTES} may be signed",
            message.len()
        ));
    }
    match algorithm {
        Algorithm::Rs256 => {
            let key = rsa_key(&key_pem(secret, pointer)?)?;
            // Blinded, so the time a signature takes tells a plugin nothing of the key.
            let signature =
                SigningKey::<Sha256>::new(key).sign_with_rng(&mut rsa::rand_core::OsRng, message);
            Ok(signature.to_vec())
        }
    }
}

impl Host for State {
    async fn sign(
        &mut self,
        secret: String,
        json_pointer: Option<String>,
        algorithm: Algorithm,
        message: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let bytes = self.granted_secret(&secret)?;
        let signed = tokio::task::spawn_blocking(move || {
            sign(&bytes, json_pointer.as_deref(), algorithm, &message)
        })
        .await
        .map_err(|e| format!("signing stopped: {e}"))?;
        signed.map_err(|why| {
            tracing::warn!(plugin = %self.caps.plugin, secret = %secret, error = %why, "signing refused");
            format!("secret {secret:?}: {why}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs1v15::{Signature, VerifyingKey};
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    use rsa::signature::Verifier;

    fn key() -> RsaPrivateKey {
        RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("a key")
    }

    fn verifies(key: &RsaPrivateKey, message: &[u8], signature: &[u8]) -> bool {
        let verifying = VerifyingKey::<Sha256>::new(key.to_public_key());
        let signature = Signature::try_from(signature).expect("a signature's shape");
        verifying.verify(message, &signature).is_ok()
    }

    #[test]
    fn signs_with_a_pem_key_or_one_inside_json() {
        let key = key();
        let pem = key.to_pkcs8_pem(LineEnding::LF).expect("pem").to_string();
        let signed = sign(pem.as_bytes(), None, Algorithm::Rs256, b"a.b").expect("signed");
        assert!(verifies(&key, b"a.b", &signed));
        assert!(!verifies(&key, b"a.c", &signed));

        let json = serde_json::json!({"subject-credentials": {"private-key": pem}}).to_string();
        let pointer = Some("/subject-credentials/private-key");
        let signed = sign(json.as_bytes(), pointer, Algorithm::Rs256, b"a.b").expect("signed");
        assert!(verifies(&key, b"a.b", &signed));
    }

    #[test]
    fn refusals_say_why() {
        let err = |secret: &[u8], pointer: Option<&str>, message: &[u8]| {
            sign(secret, pointer, Algorithm::Rs256, message).expect_err("refused")
        };
        assert!(err(b"not a key", None, b"m").contains("no RSA private key"));
        assert!(err(b"{}", Some("/k"), b"m").contains("nothing at /k"));
        assert!(err(br#"{"k": 1}"#, Some("/k"), b"m").contains("/k is not a string"));
        assert!(err(b"pem", Some("/k"), b"m").contains("not JSON"));
        assert!(err(b"pem", None, &[0; 65537]).contains("at most 65536"));
    }
}
