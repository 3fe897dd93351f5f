//! The resource configuration from an etcd key, watched.

use tokio::task::JoinHandle;

use crate::{Server, ServerConfig};
use tollgate_service::{watch_key, ClientTls, EtcdError, EtcdKey};

/// The resource configuration from an etcd key, watched: Go Doorman's
/// `-config=etcd:KEY`. Every server of an elected group reads the same key,
/// so all of them serve the same configuration, and a new document put there
/// reaches every one of them.
///
/// [`EtcdConfigSource::load`] reads the key once (the configuration a server
/// starts with); [`EtcdConfigSource::spawn`] then watches it from the
/// revision read, with the service kit's etcd watch: every change is
/// applied as a file reload is (a valid document replaces the server's
/// configuration, an invalid one is logged and refused, and the server
/// keeps the previous one); a deleted key keeps the current configuration
/// and logs a warning; after an etcd failure the watch reconnects with
/// backoff and misses no change, and the server's health answers not
/// ready while etcd cannot be reached.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_doorman::{EtcdConfigSource, Server};
///
/// let source = EtcdConfigSource::new(&["127.0.0.1:2379".to_owned()], "/tollgate/config")?;
/// let (config, revision) = source.load().await?;
/// let server = Server::builder(config).build();
/// // From now on every change to the key is applied to `server`.
/// let watch = source.spawn(server.clone(), revision);
/// # drop(watch);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct EtcdConfigSource {
    key: EtcdKey,
}

impl EtcdConfigSource {
    /// The configuration at `key` on the etcd `endpoints` (`host:port` or
    /// `http://host:port`). Connects lazily; must be called within a tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`EtcdError`] for an empty endpoint list, an invalid endpoint or an
    /// empty key.
    pub fn new(
        endpoints: &[String],
        key: impl Into<String>,
    ) -> Result<EtcdConfigSource, EtcdError> {
        Ok(EtcdConfigSource {
            key: EtcdKey::new(endpoints, key, None)?,
        })
    }

    /// As [`EtcdConfigSource::new`], reaching etcd over TLS as `tls` says
    /// (endpoints without a scheme as `https://`); the files are read here.
    ///
    /// # Errors
    ///
    /// As [`EtcdConfigSource::new`], and [`EtcdError::Tls`] for a TLS file
    /// that cannot be read or holds no PEM certificate or key.
    pub fn new_tls(
        endpoints: &[String],
        key: impl Into<String>,
        tls: &ClientTls,
    ) -> Result<EtcdConfigSource, EtcdError> {
        Ok(EtcdConfigSource {
            key: EtcdKey::new(endpoints, key, Some(tls))?,
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        self.key.key()
    }

    /// Reads and validates the configuration; returns it with the store
    /// revision of the read, to watch from with [`EtcdConfigSource::spawn`]
    /// so that no later change is missed.
    ///
    /// # Errors
    ///
    /// [`EtcdError`]: etcd unreachable or not answering in time, the key
    /// missing, or its document not UTF-8 or invalid.
    pub async fn load(&self) -> Result<(ServerConfig, i64), EtcdError> {
        let key = || self.key.key().to_owned();
        let (text, revision) = self.key.read_text().await?;
        let text = text.ok_or_else(|| EtcdError::Missing { key: key() })?;
        let config = ServerConfig::from_yaml(&text).map_err(|source| EtcdError::Invalid {
            key: key(),
            source: Box::new(source),
        })?;
        Ok((config, revision))
    }

    /// Watches the key for changes after `revision` (as
    /// [`EtcdConfigSource::load`] gives) and applies each to `server` (see [`EtcdConfigSource`]), until the returned task is aborted.
    ///
    /// Must be called within a tokio runtime.
    pub fn spawn(self, server: Server, revision: i64) -> JoinHandle<()> {
        let readiness = server.readiness().clone();
        watch_key(self.key, server, revision, readiness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_endpoints_is_a_clear_error() {
        let e = EtcdConfigSource::new(&[], "/k").unwrap_err();
        assert!(matches!(e, EtcdError::NoEndpoints));
        assert_eq!(e.to_string(), "no etcd endpoints given");
    }

    #[tokio::test]
    async fn unreachable_etcd_is_an_error_not_a_hang() {
        let source = EtcdConfigSource::new(&["127.0.0.1:1".to_owned()], "/k").unwrap();
        let e = source.load().await.unwrap_err();
        assert!(matches!(e, EtcdError::Call { .. }), "{e}");
    }
}
