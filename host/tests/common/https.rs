//! A local HTTPS file server whose certificate is signed by a test CA made
//! for the run, for tests of what the host downloads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio_rustls::rustls;

pub struct FileServer {
    /// `https://127.0.0.1:PORT`
    pub base: String,
    /// The test CA, PEM: trusting it is what makes the server's cert valid.
    pub ca_pem: String,
    /// Paths requested, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl FileServer {
    /// Serves `files` (path to bytes) until the runtime ends.
    pub async fn start(files: BTreeMap<String, Vec<u8>>) -> FileServer {
        let cert = LocalCert::new();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let port = serve(&cert, move |req| {
            let path = req.uri().path().to_string();
            seen.lock().expect("lock").push(path.clone());
            match files.get(&path) {
                Some(bytes) => (hyper::StatusCode::OK, bytes.clone()),
                None => (hyper::StatusCode::NOT_FOUND, b"not found".to_vec()),
            }
        })
        .await;
        FileServer {
            base: format!("https://127.0.0.1:{port}"),
            ca_pem: cert.ca_pem.clone(),
            requests,
        }
    }
}

/// Serves HTTPS on 127.0.0.1 with `cert` until the runtime ends, answering
/// each request with `answer`'s status and body; returns the port.
pub async fn serve(
    cert: &LocalCert,
    answer: impl Fn(&hyper::Request<hyper::body::Incoming>) -> (hyper::StatusCode, Vec<u8>)
    + Send
    + Sync
    + 'static,
) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let (status, body) = answer(&req);
                    let mut response =
                        hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
                    *response.status_mut() = status;
                    async move { Ok::<_, hyper::Error>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

/// A CA made for the run and a certificate for 127.0.0.1 signed by it: what
/// a local HTTPS server (ours, or a registry's) presents.
pub struct LocalCert {
    /// The CA, PEM: trusting it is what makes the certificate valid.
    pub ca_pem: String,
    /// The certificate then the CA, PEM, as servers read a chain file.
    pub chain_pem: String,
    pub key_pem: String,
    pub chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub key_der: Vec<u8>,
}

impl LocalCert {
    pub fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "local server test CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca cert");
        let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("leaf")
            .signed_by(&leaf_key, &ca)
            .expect("leaf cert");
        LocalCert {
            ca_pem: ca.pem(),
            chain_pem: format!("{}{}", leaf.pem(), ca.pem()),
            key_pem: leaf_key.serialize_pem(),
            chain: vec![leaf.der().clone(), ca.der().clone()],
            key_der: leaf_key.serialize_der(),
        }
    }

    /// A TLS server configuration presenting this certificate.
    pub fn server_config(&self) -> rustls::ServerConfig {
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(
            self.chain.clone(),
            rustls::pki_types::PrivatePkcs8KeyDer::from(self.key_der.clone()).into(),
        )
        .expect("server config")
    }
}
