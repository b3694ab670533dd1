//! Throw-away certificates for trying TLS (`hopping-gateway gen-cert`, README "TLS quick start"):
//! a self-signed CA, a server certificate for the given names and a client certificate, all
//! ECDSA P-256, signed with rcgen. Not for production: the CA key sits next to the certificates.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The PEM texts of one generated set.
#[derive(Debug)]
pub struct Generated {
    /// The CA certificate (`ca.pem`): give it to clients (`curl --cacert`) and as `client_ca`.
    pub ca_cert: String,
    /// The CA's private key (`ca.key`).
    pub ca_key: String,
    /// The server certificate for the names (`gateway.pem`).
    pub cert: String,
    /// Its private key, PKCS#8 (`gateway.key`).
    pub key: String,
    /// A client certificate signed by the CA, for trying `client_ca` (`client.pem`).
    pub client_cert: String,
    /// Its private key (`client.key`).
    pub client_key: String,
}

/// Makes a CA and, signed by it, a server certificate whose subject alternative names are `names`
/// (DNS names or IP addresses; the first is also the common name) and a client certificate.
///
/// # Errors
/// `names` is empty or holds a name rcgen cannot encode, or key generation failed.
pub fn generate(names: &[String]) -> Result<Generated, rcgen::Error> {
    let first = names
        .first()
        .ok_or(rcgen::Error::CouldNotParseCertificate)?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "hopping-gateway throw-away CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = CertifiedIssuer::self_signed(ca, ca_key)?;

    let mut server = CertificateParams::new(names.to_vec())?;
    server.distinguished_name.push(DnType::CommonName, first);
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "hopping-gateway client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &issuer)?;

    Ok(Generated {
        ca_cert: issuer.pem(),
        ca_key: ca_key_pem,
        cert: server_cert.pem(),
        key: server_key.serialize_pem(),
        client_cert: client_cert.pem(),
        client_key: client_key.serialize_pem(),
    })
}

/// Writes `g` into `dir` (created if missing) as `ca.pem`, `ca.key`, `gateway.pem`,
/// `gateway.key`, `client.pem`, `client.key`; key files are readable by the owner only.
/// Returns the paths written.
///
/// # Errors
/// The directory or a file cannot be written.
pub fn write(dir: &Path, g: &Generated) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let files = [
        ("ca.pem", &g.ca_cert, false),
        ("ca.key", &g.ca_key, true),
        ("gateway.pem", &g.cert, false),
        ("gateway.key", &g.key, true),
        ("client.pem", &g.client_cert, false),
        ("client.key", &g.client_key, true),
    ];
    let mut written = Vec::new();
    for (name, text, secret) in files {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        #[cfg(unix)]
        if secret {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        #[cfg(not(unix))]
        let _ = secret;
        written.push(path);
    }
    Ok(written)
}
