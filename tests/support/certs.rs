//! Throw-away certificates for TLS tests, made with rcgen (ECDSA P-256) and written as PEM files
//! into a temporary directory that lives as long as the [`Ca`].

use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A test CA: its PEM file and an issuer for leaf certificates.
pub struct Ca {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM file).
    pub cert: PathBuf,
    /// Leaf files written so far (names are made unique with it).
    count: std::cell::Cell<usize>,
}

/// A leaf certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// Certificate chain file (leaf only; the CA is not included).
    pub cert: PathBuf,
    /// Private key file (PKCS#8).
    pub key: PathBuf,
}

impl Leaf {
    /// The mock-backend flags serving this leaf: `--tls-cert C --tls-key K`.
    pub fn mock_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }
}

/// What kind of leaf to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 2020 to 2100.
    Current,
    /// Expired: valid 2020-01-01 to 2021-01-01.
    Expired,
}

impl Ca {
    /// A new CA named `name`, written to `<tmp>/ca.pem`.
    pub fn new(name: &str) -> Ca {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2100, 1, 1);
        let cert = params.self_signed(&key).expect("self-signed CA");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, cert.pem()).expect("write CA");
        Ca {
            issuer: Issuer::new(params, key),
            cert: path,
            dir,
            count: std::cell::Cell::new(0),
        }
    }

    /// The directory the files live in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server leaf for `names` (DNS names or IP addresses), valid now.
    pub fn server(&self, names: &[&str]) -> Leaf {
        self.leaf(
            names,
            Validity::Current,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client leaf (for mTLS) with common name `name`.
    pub fn client(&self, name: &str) -> Leaf {
        self.leaf(
            &[name],
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A leaf for `names` with the given validity and extended key usage.
    pub fn leaf(&self, names: &[&str], validity: Validity, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let (from, to) = match validity {
            Validity::Current => (date_time_ymd(2020, 1, 1), date_time_ymd(2100, 1, 1)),
            Validity::Expired => (date_time_ymd(2020, 1, 1), date_time_ymd(2021, 1, 1)),
        };
        params.not_before = from;
        params.not_after = to;
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        let n = self.count.get();
        self.count.set(n + 1);
        let cert_path = self.dir.path().join(format!("leaf{n}.pem"));
        let key_path = self.dir.path().join(format!("leaf{n}.key"));
        std::fs::write(&cert_path, cert.pem()).expect("write leaf");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        Leaf {
            cert: cert_path,
            key: key_path,
        }
    }
}

/// A rustls client config trusting only `ca` (PEM file), offering `alpn`, with an optional client
/// certificate.
pub fn client_config(
    ca: &Path,
    alpn: &[&[u8]],
    client: Option<&Leaf>,
) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("read CA") {
        roots.add(c.expect("CA PEM")).expect("add CA");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some(leaf) => {
            let chain = CertificateDer::pem_file_iter(&leaf.cert)
                .expect("read cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("cert PEM");
            let key = PrivateKeyDer::from_pem_file(&leaf.key).expect("key PEM");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client auth")
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    std::sync::Arc::new(cfg)
}

/// One HTTP/1.1 request over a new TLS connection to `addr` (`127.0.0.1:port`) trusting `ca`,
/// with server name `127.0.0.1`; 10 s overall timeout.
///
/// # Errors
/// Connect, handshake or HTTP errors.
pub async fn https_request(
    ca: &Path,
    addr: &str,
    method: &str,
    path: &str,
) -> anyhow::Result<crate::Resp> {
    use http_body_util::{BodyExt, Empty};
    let cfg = client_config(ca, &[b"http/1.1"], None);
    let fut = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr)
            .body(Empty::<bytes::Bytes>::new())?;
        let resp = send.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, anyhow::Error>(crate::Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), fut).await?
}
