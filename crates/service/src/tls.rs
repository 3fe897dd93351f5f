//! TLS and mutual TLS for the gRPC servers and clients: certificate, key
//! and CA files in PEM, read once when a server or client is built.
//!
//! [`ServerTls`] is a server's certificate and key, and optionally a client
//! CA: when one is given, every client must present a certificate signed by
//! it (mutual TLS). [`ClientTls`] is the CA a client trusts the server's
//! certificate by, and optionally the client's own certificate and key.
//!
//! ```no_run
//! use tollgate_service::{ClientTls, ServerTls};
//!
//! # fn main() -> Result<(), tollgate_service::TlsError> {
//! // Server side, with client certificates required.
//! let server = ServerTls::new("server.pem", "server.key").client_ca("clients-ca.pem");
//! server.load()?; // reads and checks the three files
//!
//! // Client side: trust `ca.pem`, present `client.pem`.
//! let client = ClientTls::new("ca.pem").identity("client.pem", "client.key");
//! client.load()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation notes
//!
//! Files are read and checked for PEM blocks here so that a wrong path or a
//! key given as a certificate fails with the file's name before anything
//! listens or dials; rustls (with the `ring` provider) does the handshake
//! and the certificate checks: on the lean servers through
//! [`ServerTls::rustls_config`], on tonic's through [`ServerTls::load`].

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// A server's TLS setup: certificate chain and private key, and an
/// optional client CA that turns on mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
}

impl ServerTls {
    /// TLS with the certificate chain in `cert_file` and the private key in
    /// `key_file` (both PEM).
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> ServerTls {
        ServerTls {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
        }
    }

    /// Requires every client to present a certificate signed by a CA in
    /// `ca_file` (PEM): mutual TLS.
    pub fn client_ca(mut self, ca_file: impl Into<PathBuf>) -> ServerTls {
        self.client_ca_file = Some(ca_file.into());
        self
    }

    /// Whether clients must present a certificate (mutual TLS: a client CA
    /// was given).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_service::ServerTls;
    ///
    /// let tls = ServerTls::new("server.pem", "server.key");
    /// assert!(!tls.is_mutual());
    /// assert!(tls.client_ca("clients-ca.pem").is_mutual());
    /// ```
    pub fn is_mutual(&self) -> bool {
        self.client_ca_file.is_some()
    }

    /// Reads the files into tonic's server TLS configuration.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming the file that cannot be read or holds no PEM
    /// certificate or key.
    pub fn load(&self) -> Result<ServerTlsConfig, TlsError> {
        // rustls checks the certificate and key now, not at the first
        // handshake.
        self.rustls_config()?;
        let cert = read_pem(&self.cert_file, Pem::Certificate)?;
        let key = read_pem(&self.key_file, Pem::PrivateKey)?;
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if let Some(ca) = &self.client_ca_file {
            let ca = read_pem(ca, Pem::Certificate)?;
            config = config
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(false);
        }
        Ok(config)
    }

    /// Reads the files into a rustls server configuration offering HTTP/2
    /// (ALPN `h2`), for the lean gRPC server
    /// ([`GrpcServer::tls`](crate::GrpcServer::tls)).
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming the file that cannot be read or holds no usable
    /// PEM certificate or key, or rustls refusing the setup (a key that
    /// does not match the certificate, say).
    pub fn rustls_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs = certificates(&self.cert_file)?;
        let key = private_key(&self.key_file)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::setup)?;
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca_file) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in certificates(ca_file)? {
                    roots.add(ca).map_err(|e| TlsError::Malformed {
                        path: ca_file.clone(),
                        reason: e.to_string(),
                    })?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(TlsError::setup)?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| own_certificate(&self.cert_file, &self.key_file, e))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// What is wrong with the dates of the certificate (the first in the
    /// chain) at `now`, if anything: expired, or not valid yet. Clients
    /// refuse such a certificate; a server says so when it starts rather
    /// than leave each client to find out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_service::ServerTls;
    ///
    /// let tls = ServerTls::new("server.pem", "server.key");
    /// if let Some(problem) = tls.date_problem(std::time::SystemTime::now()) {
    ///     eprintln!("warning: {problem}");
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// None: a file that cannot be read, or a certificate whose dates
    /// cannot be read, gives `None` ([`ServerTls::load`] names those).
    pub fn date_problem(&self, now: std::time::SystemTime) -> Option<String> {
        let cert = certificates(&self.cert_file).ok()?.into_iter().next()?;
        let dates = crate::tls_dates::validity(&cert)?;
        let now = match now.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        };
        let path = self.cert_file.display();
        if now > dates.not_after.unix {
            Some(format!(
                "the certificate in {path} expired on {}: clients refuse it until it is renewed \
                 (or this machine's clock is wrong)",
                dates.not_after
            ))
        } else if now < dates.not_before.unix {
            Some(format!(
                "the certificate in {path} is not valid until {}: clients refuse it until then \
                 (or this machine's clock is wrong)",
                dates.not_before
            ))
        } else {
            None
        }
    }
}

/// rustls refusing the certificate in `path` or its key in `key_file`:
/// the file named with the fix when it is the certificate, both when they
/// do not belong together.
fn own_certificate(path: &Path, key_file: &Path, error: rustls::Error) -> TlsError {
    if let rustls::Error::InconsistentKeys(_) = error {
        return TlsError::KeyMismatch {
            cert: path.to_owned(),
            key: key_file.to_owned(),
        };
    }
    match crate::tls_failure::own_certificate(&error) {
        Some(reason) => TlsError::Malformed {
            path: path.to_owned(),
            reason,
        },
        None => TlsError::setup(error),
    }
}

/// Every certificate in the PEM file at `path`.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path, Pem::Certificate)?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Malformed {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

/// A client's TLS setup: the CA that signed the server's certificate, and
/// optionally the client's own certificate and key for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    ca_file: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    domain: Option<String>,
}

impl ClientTls {
    /// TLS trusting the CA certificates in `ca_file` (PEM).
    pub fn new(ca_file: impl Into<PathBuf>) -> ClientTls {
        ClientTls {
            ca_file: ca_file.into(),
            identity: None,
            domain: None,
        }
    }

    /// Presents the certificate in `cert_file` with the key in `key_file`
    /// (both PEM) to servers that require client certificates.
    pub fn identity(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> ClientTls {
        self.identity = Some((cert_file.into(), key_file.into()));
        self
    }

    /// Checks the server's certificate against `domain` instead of the
    /// host in the address dialled.
    pub fn domain(mut self, domain: impl Into<String>) -> ClientTls {
        self.domain = Some(domain.into());
        self
    }

    /// Reads the files into tonic's client TLS configuration.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming the file that cannot be read or holds no PEM
    /// certificate or key.
    pub fn load(&self) -> Result<ClientTlsConfig, TlsError> {
        // rustls checks the certificates and key now, not at the first
        // connection.
        self.rustls_config()?;
        let ca = read_pem(&self.ca_file, Pem::Certificate)?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((cert, key)) = &self.identity {
            let cert = read_pem(cert, Pem::Certificate)?;
            let key = read_pem(key, Pem::PrivateKey)?;
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &self.domain {
            config = config.domain_name(domain.clone());
        }
        Ok(config)
    }

    /// Reads the files into a rustls client configuration offering HTTP/2
    /// (ALPN `h2`), for a client of its own on `h2`.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming the file that cannot be read or used, or rustls
    /// refusing the setup.
    pub fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in certificates(&self.ca_file)? {
            roots.add(ca).map_err(|e| TlsError::Malformed {
                path: self.ca_file.clone(),
                reason: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::setup)?
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((cert_file, key_file)) => {
                let key = private_key(key_file)?;
                builder
                    .with_client_auth_cert(certificates(cert_file)?, key)
                    .map_err(|e| own_certificate(cert_file, key_file, e))?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// The name the server's certificate must carry when dialling `host`:
    /// the [`domain`](Self::domain) if one was given, else `host`.
    pub fn server_name<'h>(&'h self, host: &'h str) -> &'h str {
        self.domain.as_deref().unwrap_or(host)
    }
}

/// The private key in the PEM file at `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(path, Pem::PrivateKey)?;
    // PKCS#8's `ENCRYPTED PRIVATE KEY`, or OpenSSL's older headers on an
    // `RSA PRIVATE KEY` or `EC PRIVATE KEY`.
    let text = String::from_utf8_lossy(&pem);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
    {
        return Err(TlsError::Encrypted {
            path: path.to_owned(),
        });
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Malformed {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A TLS file that cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// The file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file holds no PEM block of the kind expected.
    NotPem {
        /// The file.
        path: PathBuf,
        /// What it should hold: "certificate" or "private key".
        expected: &'static str,
    },
    /// rustls refused the certificate or key (a malformed or unsupported
    /// key, or a key that does not match the certificate).
    Rejected {
        /// Why, as tonic reports it.
        source: tonic::transport::Error,
    },
    /// The file holds PEM blocks of the right kind that cannot be decoded.
    Malformed {
        /// The file.
        path: PathBuf,
        /// Why, as rustls reports it.
        reason: String,
    },
    /// The private key is encrypted with a passphrase, which a server
    /// cannot ask for.
    Encrypted {
        /// The key file.
        path: PathBuf,
    },
    /// The private key is not the certificate's.
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// rustls refused the setup: an unsupported key or a CA it cannot
    /// use.
    Setup {
        /// Why, as rustls reports it.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl TlsError {
    fn setup(source: impl std::error::Error + Send + Sync + 'static) -> TlsError {
        TlsError::Setup {
            source: Box::new(source),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, .. } => {
                write!(f, "cannot read TLS file {}", path.display())
            }
            TlsError::NotPem { path, expected } => {
                write!(f, "TLS file {} holds no PEM {expected}", path.display())
            }
            TlsError::Rejected { .. } | TlsError::Setup { .. } => f.write_str("TLS setup rejected"),
            TlsError::Malformed { path, reason } => {
                write!(f, "TLS file {} is not usable: {reason}", path.display())
            }
            TlsError::Encrypted { path } => write!(
                f,
                "TLS key {} is encrypted: give it decrypted (e.g. `openssl pkey -in {0} -out \
                 key.pem`, which asks for its passphrase), and keep that file private",
                path.display()
            ),
            TlsError::KeyMismatch { cert, key } => write!(
                f,
                "the private key in {} does not match the certificate in {}: give the key the \
                 certificate was issued for",
                key.display(),
                cert.display()
            ),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Read { source, .. } => Some(source),
            TlsError::NotPem { .. }
            | TlsError::Malformed { .. }
            | TlsError::Encrypted { .. }
            | TlsError::KeyMismatch { .. } => None,
            TlsError::Rejected { source } => Some(source),
            TlsError::Setup { source } => Some(source.as_ref()),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Pem {
    Certificate,
    PrivateKey,
}

/// Files larger than this are refused: no certificate chain or key is.
const MAX_PEM_BYTES: u64 = 1 << 20;

fn read_pem(path: &Path, kind: Pem) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read)?.len();
    if len > MAX_PEM_BYTES {
        return Err(read(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes, more than {MAX_PEM_BYTES}"),
        )));
    }
    let bytes = std::fs::read(path).map_err(read)?;
    let text = String::from_utf8_lossy(&bytes);
    let (found, expected) = match kind {
        Pem::Certificate => (text.contains("-----BEGIN CERTIFICATE-----"), "certificate"),
        Pem::PrivateKey => (
            text.lines()
                .any(|l| l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----")),
            "private key",
        ),
    };
    if !found {
        return Err(TlsError::NotPem {
            path: path.to_owned(),
            expected,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `contents` in a file `name`, in a directory removed when the guard
    /// drops.
    fn temp(name: &str, contents: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-tls-unit-")
            .tempdir()
            .unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        (dir, path)
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = ServerTls::new("/nonexistent/cert.pem", "/nonexistent/key.pem")
            .load()
            .unwrap_err();
        assert!(matches!(
            &err,
            TlsError::Read { path, source }
                if path == Path::new("/nonexistent/cert.pem")
                    && source.kind() == io::ErrorKind::NotFound
        ));
        assert_eq!(
            err.to_string(),
            "cannot read TLS file /nonexistent/cert.pem"
        );
    }

    #[test]
    fn a_key_given_as_a_certificate_is_refused() {
        let (_dir, key) = temp(
            "key-as-cert.pem",
            "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
        );
        let err = ClientTls::new(&key).load().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("TLS file {} holds no PEM certificate", key.display())
        );
    }

    #[test]
    fn a_certificate_given_as_a_key_is_refused() {
        let (_dir, cert) = temp(
            "cert.pem",
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        );
        let err = ServerTls::new(&cert, &cert).load().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("TLS file {} holds no PEM private key", cert.display())
        );
    }

    /// A self-signed certificate for `localhost` valid from `from` to
    /// `to` (year, month, day), and its key, as PEM files in `dir`.
    fn certificate(dir: &Path, from: (i32, u8, u8), to: (i32, u8, u8)) -> (PathBuf, PathBuf) {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }

    fn unix(secs: u64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
    }

    #[test]
    fn a_certificate_outside_its_dates_is_named_with_the_date() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = certificate(dir.path(), (2020, 1, 1), (2021, 1, 1));
        let tls = ServerTls::new(&cert, &key);
        // 2021-01-01 00:00:00 UTC is 1_609_459_200.
        assert_eq!(tls.date_problem(unix(1_609_459_200)), None);
        assert_eq!(
            tls.date_problem(unix(1_609_459_201)),
            Some(format!(
                "the certificate in {} expired on 2021-01-01 00:00:00 UTC: clients refuse it \
                 until it is renewed (or this machine's clock is wrong)",
                cert.display()
            ))
        );
        // 2020-01-01 00:00:00 UTC is 1_577_836_800.
        assert_eq!(tls.date_problem(unix(1_577_836_800)), None);
        let early = tls.date_problem(unix(1_577_836_799)).unwrap();
        assert!(
            early.ends_with(
                "is not valid until 2020-01-01 00:00:00 UTC: clients refuse it until \
                 then (or this machine's clock is wrong)"
            ),
            "{early}"
        );
        // Loading does not refuse it: clients do.
        tls.rustls_config().unwrap();
    }

    #[test]
    fn an_encrypted_key_is_named_as_encrypted() {
        for pem in [
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (cert, _) = certificate(dir.path(), (2020, 1, 1), (2999, 1, 1));
            let key = dir.path().join("encrypted.pem");
            std::fs::write(&key, pem).unwrap();
            let err = ServerTls::new(&cert, &key).load().unwrap_err();
            assert!(matches!(err, TlsError::Encrypted { .. }), "{err:?}");
            assert!(
                err.to_string()
                    .starts_with(&format!("TLS key {} is encrypted: give it decrypted", key.display())),
                "{err}"
            );
        }
    }

    #[test]
    fn a_key_of_another_certificate_names_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = certificate(dir.path(), (2020, 1, 1), (2999, 1, 1));
        let other = tempfile::tempdir().unwrap();
        let (_, key) = certificate(other.path(), (2020, 1, 1), (2999, 1, 1));
        let expected = format!(
            "the private key in {} does not match the certificate in {}: give the key the \
             certificate was issued for",
            key.display(),
            cert.display()
        );
        let err = ServerTls::new(&cert, &key).load().unwrap_err();
        assert_eq!(err.to_string(), expected);
        let err = ClientTls::new(&cert)
            .identity(&cert, &key)
            .load()
            .unwrap_err();
        assert_eq!(err.to_string(), expected);
    }
}
