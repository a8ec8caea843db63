//! HTTPS for the emulator: a CA made at start and a certificate for
//! 127.0.0.1 signed by it. Clients trust the CA's PEM (`Emulator::ca_pem`);
//! azure_identity accepts only an https authority, and real ARM is https.

use std::sync::Arc;
use tokio_rustls::rustls;

/// A TLS acceptor for 127.0.0.1 and the PEM of the CA that signed it.
pub fn acceptor() -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "azure emulator test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let leaf_key = rcgen::KeyPair::generate()?;
    let leaf =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?
            .signed_by(&leaf_key, &ca)?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone(), ca.der().clone()],
        rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der()).into(),
    )?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca.pem()))
}
