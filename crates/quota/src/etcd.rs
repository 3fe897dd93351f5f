//! The quota configuration kept in etcd: one key holding the YAML
//! document, read at start-up and written by every admin change, so a
//! restarted server (or another one pointed at the same key) keeps the
//! changes made at run time.
//!
//! # Implementation notes
//!
//! The key is the service kit's: one channel (plaintext or TLS), etcd's v3
//! KV API (`Range` and `Put`) and a deadline on every call, so an
//! unreachable etcd fails the admin request (nothing is applied) rather
//! than hanging it.

use tollgate_service::{ClientTls, EtcdError, EtcdKey};

/// A quota configuration document stored under one etcd key.
///
/// # Examples
///
/// ```
/// use tollgate_quota::EtcdDocument;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Connects lazily: nothing is dialled until the first load or save.
/// let store = EtcdDocument::new(&["127.0.0.1:2379".to_owned()], "/tollgate/quota")?;
/// assert_eq!(store.key(), "/tollgate/quota");
/// assert!(EtcdDocument::new(&[], "/k").is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct EtcdDocument {
    key: EtcdKey,
}

impl EtcdDocument {
    /// A document under `key` on the etcd cluster at `endpoints`
    /// (`host:port` or URLs). Connects lazily; must be called within a
    /// tokio runtime.
    ///
    /// # Errors
    ///
    /// [`EtcdError`] for no endpoints, an empty key or an invalid
    /// endpoint.
    pub fn new(endpoints: &[String], key: &str) -> Result<EtcdDocument, EtcdError> {
        Ok(EtcdDocument {
            key: EtcdKey::new(endpoints, key, None)?,
        })
    }

    /// As [`EtcdDocument::new`], reaching etcd over TLS as `tls` says
    /// (endpoints without a scheme as `https://`); the files are read here.
    ///
    /// # Errors
    ///
    /// As [`EtcdDocument::new`], and [`EtcdError::Tls`] for a TLS file that
    /// cannot be read or holds no PEM certificate or key.
    pub fn new_tls(
        endpoints: &[String],
        key: &str,
        tls: &ClientTls,
    ) -> Result<EtcdDocument, EtcdError> {
        Ok(EtcdDocument {
            key: EtcdKey::new(endpoints, key, Some(tls))?,
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        self.key.key()
    }

    /// The stored document, `None` if the key does not exist.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Call`] if etcd cannot be reached or fails;
    /// [`EtcdError::NotUtf8`] for a value that is not text.
    pub async fn load(&self) -> Result<Option<String>, EtcdError> {
        Ok(self.key.read_text().await?.0)
    }

    /// Stores `document`, replacing what was there.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Call`] if etcd cannot be reached or fails.
    pub async fn save(&self, document: &str) -> Result<(), EtcdError> {
        self.key.put(document.as_bytes()).await
    }
}
