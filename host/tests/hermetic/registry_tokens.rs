//! A registry token server, as Docker Hub, GHCR or Harbor run beside their
//! registries: the registry answers 401 with a `Bearer realm=…` challenge,
//! the client asks the realm for a token for the scope it needs (with its
//! credentials, or none), and presents that token. Tokens are JWTs signed
//! (ES256) by a key whose certificate the registry trusts
//! (`rootcertbundle`), granting what the scope asks only to the user whose
//! credentials it checked; an anonymous client gets a token that grants
//! nothing.

use crate::common::https::{LocalCert, serve};
use base64::Engine as _;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use std::sync::{Arc, Mutex};

pub const SERVICE: &str = "plugins-registry";
pub const ISSUER: &str = "local-token-issuer";

/// A token asked for: by whom (none when anonymous) and for which scopes.
#[derive(Clone, Debug)]
pub struct Issued {
    pub user: Option<String>,
    pub scopes: Vec<String>,
}

pub struct TokenServer {
    /// `https://127.0.0.1:PORT/token`
    pub realm: String,
    /// The signing certificate, PEM: the registry's `rootcertbundle`.
    pub signer_pem: String,
    pub issued: Arc<Mutex<Vec<Issued>>>,
}

impl TokenServer {
    /// Serves with `cert` (the registry's, so one CA covers both), checking
    /// `user`:`password` as the registry's account.
    pub async fn start(cert: &LocalCert, user: &str, password: &str) -> TokenServer {
        let key = rcgen::KeyPair::generate().expect("signing key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ISSUER);
        let signer = params.self_signed(&key).expect("signing cert");
        let signing = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &ring::rand::SystemRandom::new(),
        )
        .expect("ring reads the key");
        let x5c = base64::engine::general_purpose::STANDARD.encode(signer.der());
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let issued = Arc::new(Mutex::new(Vec::new()));
        let seen = issued.clone();
        let account = user.to_string();
        let port = serve(cert, move |req| {
            let scopes: Vec<String> =
                form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                    .filter(|(k, _)| k == "scope")
                    .map(|(_, v)| v.into_owned())
                    .collect();
            let user = match req.headers().get(hyper::header::AUTHORIZATION) {
                None => None,
                Some(given) if given.as_bytes() == basic.as_bytes() => Some(account.clone()),
                Some(_) => {
                    return (
                        hyper::StatusCode::UNAUTHORIZED,
                        b"{\"details\":\"incorrect username or password\"}".to_vec(),
                    );
                }
            };
            seen.lock().expect("lock").push(Issued {
                user: user.clone(),
                scopes: scopes.clone(),
            });
            let access: Vec<serde_json::Value> = match &user {
                None => Vec::new(),
                Some(_) => scopes.iter().filter_map(|s| grant(s)).collect(),
            };
            let token = jwt(&signing, &x5c, user.as_deref().unwrap_or(""), access);
            let body =
                serde_json::json!({"token": token, "access_token": token, "expires_in": 300});
            (hyper::StatusCode::OK, body.to_string().into_bytes())
        })
        .await;
        TokenServer {
            realm: format!("https://127.0.0.1:{port}/token"),
            signer_pem: signer.pem(),
            issued,
        }
    }

    pub fn issued(&self) -> Vec<Issued> {
        self.issued.lock().expect("lock").clone()
    }
}

/// `repository:NAME:ACTIONS` as the token's access claim.
fn grant(scope: &str) -> Option<serde_json::Value> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    Some(serde_json::json!({
        "type": kind,
        "name": name,
        "actions": actions.split(',').collect::<Vec<_>>(),
    }))
}

fn jwt(key: &EcdsaKeyPair, x5c: &str, subject: &str, access: Vec<serde_json::Value>) -> String {
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [x5c]});
    let claims = serde_json::json!({
        "iss": ISSUER,
        "sub": subject,
        "aud": SERVICE,
        "exp": now + 300,
        "nbf": now - 10,
        "iat": now,
        "jti": format!("{now}-{}", access.len()),
        "access": access,
    });
    let signed = format!("{}.{}", b64(&header), b64(&claims));
    let signature = key
        .sign(&ring::rand::SystemRandom::new(), signed.as_bytes())
        .expect("sign");
    format!(
        "{signed}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.as_ref())
    )
}
