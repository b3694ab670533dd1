//! TLS for the mock's ports (SPEC section 9 `--tls-cert FILE --tls-key FILE`), so tests and
//! `make run` users can try the gateway's upstream TLS.
//!
//! [`acceptor`] loads the PEM files once at start (rustls, ring provider) and offers the ALPN list
//! it is given; `--tls-client-ca FILE` (a test knob) makes the mock demand a client certificate
//! signed by that CA. [`MockStream`] is what a connection task serves: cleartext or TLS.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The TLS files of a mock node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Test knob: demand a client certificate signed by this PEM CA (mTLS); `None` = no client auth.
    pub client_ca: Option<PathBuf>,
}

/// Builds an acceptor from `files` that offers `alpn` (e.g. `[b"h2", b"http/1.1"]`).
///
/// # Errors
/// A file that cannot be read or holds no usable certificate or key, or a key that does not fit.
pub fn acceptor(files: &TlsFiles, alpn: &[&[u8]]) -> anyhow::Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("reading {}", files.cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", files.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("reading the key {}", files.key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading {}", ca.display()))?
            {
                roots.add(c.with_context(|| format!("parsing {}", ca.display()))?)?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .context("certificate and key")?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A TLS acceptor that can sit in `Debug` structs.
#[derive(Clone)]
pub(crate) struct Acceptor(pub(crate) TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// One accepted connection: cleartext or TLS (boxed: the TLS state is large).
pub(crate) enum MockStream {
    /// Cleartext TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl MockStream {
    /// Runs the TLS handshake on `tcp` when `tls` is given.
    ///
    /// # Errors
    /// The handshake's error (the client went away or failed verification).
    pub(crate) async fn accept(tcp: TcpStream, tls: Option<&TlsAcceptor>) -> io::Result<Self> {
        match tls {
            None => Ok(MockStream::Plain(tcp)),
            Some(a) => Ok(MockStream::Tls(Box::new(a.accept(tcp).await?))),
        }
    }

    /// The TCP socket underneath.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            MockStream::Plain(s) => s,
            MockStream::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for MockStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MockStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MockStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MockStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MockStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MockStream::Plain(s) => s.is_write_vectored(),
            MockStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_flush(cx),
            MockStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MockStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
