//! TLS helpers for the tests: certificates made with rcgen (ECDSA P-256: a CA, leaves, client
//! certificates, expired ones; PEM in memory and as files), rustls client configs (verifying, or recording whatever leaf the server shows),
//! and connections over TLS (raw, HTTP/1.1, HTTP/2, WebSocket).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::h2c::H2Conn;

/// A throw-away certificate authority whose files live in a temporary directory as long as it does.
pub struct Ca {
    dir: tempfile::TempDir,
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
    /// The CA certificate as a PEM file (`<dir>/ca.pem`).
    pub cert: PathBuf,
    /// Leaves issued so far (their file names are made unique with it).
    count: Cell<usize>,
}

/// A certificate and its key: PEM text, the leaf's DER (to compare with what a server shows) and
/// the PEM files written when it was issued. A struct-update copy (`Leaf { cert_pem, ..leaf }`)
/// that changes the PEM keeps the original files; [`Leaf::write`] writes the PEM as it is.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
    /// Certificate file as issued (the leaf only; the CA is not included).
    pub cert: PathBuf,
    /// Private key file as issued (PKCS#8).
    pub key: PathBuf,
}

/// How long a leaf is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 2020 to 2100.
    Current,
    /// Expired: valid 2020-01-01 to 2021-01-01.
    Expired,
}

impl Ca {
    /// A new CA with common name `cn`, valid 2020 to 2100, written to `<tmp>/ca.pem`.
    pub fn new(cn: &str) -> Ca {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2100, 1, 1);
        let issuer =
            CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key")).expect("CA");
        let pem = issuer.pem();
        let cert = dir.path().join("ca.pem");
        std::fs::write(&cert, &pem).expect("write CA");
        Ca {
            dir,
            issuer,
            pem,
            cert,
            count: Cell::new(0),
        }
    }

    /// The directory the CA's files live in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `names` (DNS names or IP addresses; the first is the CN), valid now.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.issue(
            names,
            Validity::Current,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A server certificate for `names` whose notAfter lies in the past.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.issue(
            names,
            Validity::Expired,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate (for mTLS) with common name `cn`.
    pub fn client(&self, cn: &str) -> Leaf {
        self.issue(
            &[cn],
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A leaf for `names` (SANs; the first is the CN) with the given validity and extended key
    /// usage, written as `leaf<n>.pem` and `leaf<n>.key` into [`Ca::dir`].
    pub fn issue(
        &self,
        names: &[&str],
        validity: Validity,
        usage: ExtendedKeyUsagePurpose,
    ) -> Leaf {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("params");
        p.distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        p.extended_key_usages = vec![usage];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let (from, to) = match validity {
            Validity::Current => (date_time_ymd(2020, 1, 1), date_time_ymd(2100, 1, 1)),
            Validity::Expired => (date_time_ymd(2020, 1, 1), date_time_ymd(2021, 1, 1)),
        };
        p.not_before = from;
        p.not_after = to;
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("sign");
        let n = self.count.get();
        self.count.set(n + 1);
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        let cert_path = self.dir.path().join(format!("leaf{n}.pem"));
        let key_path = self.dir.path().join(format!("leaf{n}.key"));
        std::fs::write(&cert_path, &cert_pem).expect("write leaf");
        std::fs::write(&key_path, &key_pem).expect("write key");
        Leaf {
            cert_pem,
            key_pem,
            der: cert.der().to_vec(),
            cert: cert_path,
            key: key_path,
        }
    }
}

impl Leaf {
    /// Writes `<name>.pem` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write cert");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }

    /// The mock-backend flags serving this leaf: `--tls-cert C --tls-key K` (the files as issued).
    pub fn mock_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config trusting `ca_pem`, offering `alpn`, with an optional client certificate.
pub fn client_config(ca_pem: &str, alpn: &[&str], client: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let b = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut cfg = match client {
        None => b.with_no_client_auth(),
        Some(l) => b
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(l.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client cert"),
                PrivateKeyDer::from_pem_slice(l.key_pem.as_bytes()).expect("client key"),
            )
            .expect("client auth"),
    };
    cfg.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

/// Accepts any server certificate (signatures still checked), so a test can see which leaf a
/// server picks for a name the leaf does not cover.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config that accepts whatever certificate the server shows.
pub fn any_cert_config() -> Arc<ClientConfig> {
    let p = provider();
    let cfg = ClientConfig::builder_with_provider(p.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(p)))
        .with_no_client_auth();
    Arc::new(cfg)
}

/// Connects to `127.0.0.1:port` over TLS, sending `sni` (an IP address sends no SNI).
pub async fn connect(
    port: u16,
    sni: &str,
    cfg: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(sni.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    tokio::time::timeout(
        Duration::from_secs(5),
        TlsConnector::from(cfg).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))?
}

/// The leaf certificate (DER) the server showed on `s`.
pub fn peer_leaf(s: &TlsStream<TcpStream>) -> Vec<u8> {
    s.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

/// The ALPN protocol negotiated on `s`.
pub fn alpn(s: &TlsStream<TcpStream>) -> Option<String> {
    s.get_ref()
        .1
        .alpn_protocol()
        .map(|a| String::from_utf8_lossy(a).into_owned())
}

/// An HTTP/1.1 client connection over `s`.
pub async fn http1(
    s: TlsStream<TcpStream>,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(send)
}

/// `GET path` on an HTTP/1.1 connection: status, version and body text.
pub async fn h1_get(
    send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: &str,
    path: &str,
) -> anyhow::Result<(u16, http::Version, String)> {
    send.ready().await?;
    let req = http::Request::builder()
        .uri(path)
        .header("host", host)
        .body(Full::new(Bytes::new()))?;
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req)).await??;
    let (status, version) = (resp.status().as_u16(), resp.version());
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, version, String::from_utf8_lossy(&body).into_owned()))
}

/// An HTTP/2 connection over `s` (the helpers of [`crate::h2c`] work on it).
pub async fn h2(s: TlsStream<TcpStream>, authority: &str) -> H2Conn {
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(s))
        .await
        .expect("h2 handshake over TLS");
    H2Conn {
        send,
        conn: tokio::spawn(conn),
        authority: authority.to_string(),
    }
}

/// The leaves recorded by one probe, for tests that watch which certificate new handshakes get.
pub type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// Swaps a Kubernetes-secret style directory: `dir/..data` is a symlink to a versioned directory
/// holding `tls.crt` and `tls.key`; `dir/tls.crt` and `dir/tls.key` point through `..data`.
/// Each call writes a new version and renames a new `..data` link over the old one (atomic).
pub fn k8s_swap(dir: &Path, version: usize, leaf: &Leaf) {
    let v = dir.join(format!("..v{version}"));
    std::fs::create_dir_all(&v).expect("version dir");
    std::fs::write(v.join("tls.crt"), &leaf.cert_pem).expect("write");
    std::fs::write(v.join("tls.key"), &leaf.key_pem).expect("write");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    for f in ["tls.crt", "tls.key"] {
        let link = dir.join(f);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{f}"), &link).expect("symlink");
        }
    }
}

/// One HTTP/1.1 request over a new TLS connection to `addr` (`127.0.0.1:port`) trusting `ca_pem`,
/// with server name `127.0.0.1`; 10 s overall timeout.
///
/// # Errors
/// Connect, handshake or HTTP errors.
pub async fn https_request(
    ca_pem: &str,
    addr: &str,
    method: &str,
    path: &str,
) -> anyhow::Result<crate::Resp> {
    use http_body_util::{BodyExt, Empty};
    let cfg = client_config(ca_pem, &["http/1.1"], None);
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
