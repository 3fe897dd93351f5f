//! The resource configuration from an etcd key, watched: Go Doorman's
//! `-config=etcd:KEY`. Every server of an elected group reads the same key,
//! so all of them serve the same configuration, and a new document put there
//! reaches every one of them.
//!
//! [`EtcdConfigSource::load`] reads the key once (the configuration a server
//! starts with); [`EtcdConfigSource::spawn`] then watches it from the
//! revision read. Every change is applied as a file reload is: a valid
//! document replaces the server's configuration, an invalid one is logged
//! and refused, and the server keeps the previous one. A deleted key keeps
//! the current configuration and logs a warning. After an etcd failure the
//! watch reconnects with exponential backoff (100 ms doubling to 5 s) and
//! resumes from the revision after the last change it saw, so no change is
//! missed; if etcd has compacted that history away, the key is read afresh.
//!
//! # Example
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tollgate::doorman::clock::SystemWallClock;
//! use tollgate::doorman::election::single::Single;
//! use tollgate::doorman::reload::etcd::EtcdConfigSource;
//! use tollgate::doorman::server::Server;
//!
//! let source = EtcdConfigSource::new(&["127.0.0.1:2379".to_owned()], "/tollgate/config")?;
//! let loaded = source.load().await?;
//! let election = Single::new(None);
//! let server = Server::new(loaded.config, &election, Arc::new(SystemWallClock));
//! // From now on every change to the key is applied to `server`.
//! let watch = source.spawn(server.clone(), loaded.revision);
//! # drop(watch);
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::doorman::config::{Config, ConfigError};
use crate::doorman::election::etcd::{channel, EtcdError};
use crate::doorman::server::Server;
use crate::etcd_wire::{self as wire, unary};
use crate::service::apply_config as apply;
use crate::service::ClientTls;

/// The first wait before reconnecting a failed watch.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait before reconnecting a failed watch.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long one read of the key may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the configuration could not be read from etcd.
#[derive(Debug)]
pub enum EtcdSourceError {
    /// The endpoints or the TLS files cannot be used.
    Connect(EtcdError),
    /// etcd could not be read.
    Etcd {
        /// The key.
        key: String,
        /// etcd's or the transport's error.
        source: tonic::Status,
    },
    /// etcd did not answer within 10 s.
    Timeout {
        /// The key.
        key: String,
    },
    /// The key does not exist.
    Missing {
        /// The key.
        key: String,
    },
    /// The key holds no valid configuration.
    Invalid {
        /// The key.
        key: String,
        /// What is wrong with it.
        source: ConfigError,
    },
}

impl fmt::Display for EtcdSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdSourceError::Connect(e) => write!(f, "{e}"),
            EtcdSourceError::Etcd { key, source } => {
                write!(f, "cannot read etcd key {key:?}: {}", source.message())
            }
            EtcdSourceError::Timeout { key } => {
                write!(
                    f,
                    "cannot read etcd key {key:?}: no answer within {READ_TIMEOUT:?}"
                )
            }
            EtcdSourceError::Missing { key } => write!(f, "etcd key {key:?} does not exist"),
            EtcdSourceError::Invalid { key, source } => write!(f, "etcd key {key:?}: {source}"),
        }
    }
}

impl std::error::Error for EtcdSourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Their messages are already in this error's: go on from their causes.
            EtcdSourceError::Connect(e) => e.source(),
            EtcdSourceError::Etcd { source, .. } => Some(source),
            EtcdSourceError::Invalid { source, .. } => source.source(),
            _ => None,
        }
    }
}

/// A configuration read from etcd, and the etcd revision it was read at.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// The store revision of the read; watch from it with
    /// [`EtcdConfigSource::spawn`] so that no later change is missed.
    pub revision: i64,
}

/// An etcd key holding a resource configuration (Doorman's YAML format).
#[derive(Debug, Clone)]
pub struct EtcdConfigSource {
    channel: Channel,
    key: String,
}

impl EtcdConfigSource {
    /// The configuration at `key` on the etcd `endpoints` (`host:port` or
    /// `http://host:port`). Connects lazily; must be called within a tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`EtcdSourceError::Connect`] for an empty endpoint list or an invalid
    /// endpoint.
    pub fn new(
        endpoints: &[String],
        key: impl Into<String>,
    ) -> Result<EtcdConfigSource, EtcdSourceError> {
        Ok(EtcdConfigSource {
            channel: channel(endpoints, None).map_err(EtcdSourceError::Connect)?,
            key: key.into(),
        })
    }

    /// As [`EtcdConfigSource::new`], reaching etcd over TLS as `tls` says
    /// (endpoints without a scheme as `https://`); the files are read here.
    ///
    /// # Errors
    ///
    /// As [`EtcdConfigSource::new`], and a TLS file that cannot be read or
    /// holds no PEM certificate or key.
    pub fn new_tls(
        endpoints: &[String],
        key: impl Into<String>,
        tls: &ClientTls,
    ) -> Result<EtcdConfigSource, EtcdSourceError> {
        let tls = tls
            .load()
            .map_err(|e| EtcdSourceError::Connect(EtcdError::Tls(e)))?;
        Ok(EtcdConfigSource {
            channel: channel(endpoints, Some(&tls)).map_err(EtcdSourceError::Connect)?,
            key: key.into(),
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Reads and validates the configuration.
    ///
    /// # Errors
    ///
    /// [`EtcdSourceError`]: etcd unreachable or not answering within 10 s,
    /// the key missing, or its document invalid.
    pub async fn load(&self) -> Result<Loaded, EtcdSourceError> {
        let (value, revision) = self.read().await?;
        let value = value.ok_or_else(|| EtcdSourceError::Missing {
            key: self.key.clone(),
        })?;
        let config = parse(&value).map_err(|source| EtcdSourceError::Invalid {
            key: self.key.clone(),
            source,
        })?;
        Ok(Loaded { config, revision })
    }

    /// Watches the key for changes after `revision` (as [`Loaded::revision`]
    /// gives) and applies each to `server` (see the [module
    /// documentation](self)), until the returned task is aborted.
    ///
    /// Must be called within a tokio runtime.
    pub fn spawn(self, server: Server, revision: i64) -> JoinHandle<()> {
        tokio::spawn(async move { self.watch(server, revision).await })
    }

    /// The key's value (`None` if it does not exist) and the store revision.
    async fn read(&self) -> Result<(Option<Vec<u8>>, i64), EtcdSourceError> {
        let call = unary::<wire::RangeRequest, wire::RangeResponse>(
            &self.channel,
            "/etcdserverpb.KV/Range",
            wire::RangeRequest {
                key: self.key.clone().into_bytes(),
            },
        );
        let response = match timeout(READ_TIMEOUT, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(source)) => {
                return Err(EtcdSourceError::Etcd {
                    key: self.key.clone(),
                    source,
                })
            }
            Err(_) => {
                return Err(EtcdSourceError::Timeout {
                    key: self.key.clone(),
                })
            }
        };
        let revision = response.header.map_or(0, |h| h.revision);
        Ok((response.kvs.into_iter().next().map(|kv| kv.value), revision))
    }

    async fn watch(self, server: Server, revision: i64) {
        let origin = format!("etcd:{}", self.key);
        let mut next = revision + 1;
        let mut backoff = MIN_BACKOFF;
        loop {
            let why = self
                .watch_once(&server, &origin, &mut next, &mut backoff)
                .await;
            warn!(key = self.key, error = why, retry_in = ?backoff, "etcd configuration watch failed; reconnecting");
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One watch stream from revision `next`, applying every change and
    /// moving `next` past it; returns why the stream ended.
    async fn watch_once(
        &self,
        server: &Server,
        origin: &str,
        next: &mut i64,
        backoff: &mut Duration,
    ) -> String {
        let (tx, rx) = mpsc::channel::<wire::WatchRequest>(1);
        // The stream opens only once the first request is sent.
        let _ = tx.try_send(wire::WatchRequest {
            create_request: Some(wire::WatchCreateRequest {
                key: self.key.clone().into_bytes(),
                start_revision: *next,
            }),
        });
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        if let Err(e) = grpc.ready().await {
            return e.to_string();
        }
        let opened = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
                tonic_prost::ProstCodec::<wire::WatchRequest, wire::WatchResponse>::default(),
            )
            .await;
        let mut stream = match opened {
            Ok(r) => r.into_inner(),
            Err(e) => return e.message().to_owned(),
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return "the watch stream ended".to_owned(),
                Err(e) => return e.message().to_owned(),
            };
            if response.created {
                debug!(
                    key = self.key,
                    from = *next,
                    "watching the etcd configuration key"
                );
                *backoff = MIN_BACKOFF;
            }
            if response.compact_revision > 0 {
                warn!(
                    key = self.key,
                    compacted = response.compact_revision,
                    "etcd compacted the history being watched; reading the key afresh"
                );
                match self.read().await {
                    Ok((value, revision)) => {
                        match value {
                            Some(value) => {
                                apply(server, &origin, parse(&value));
                            }
                            None => deleted(&self.key),
                        }
                        *next = revision + 1;
                        *backoff = MIN_BACKOFF;
                        return "restarting the watch after compaction".to_owned();
                    }
                    Err(e) => return e.to_string(),
                }
            }
            if response.canceled {
                return format!("etcd cancelled the watch: {}", response.cancel_reason);
            }
            for event in response.events {
                let Some(kv) = event.kv else { continue };
                if event.r#type == wire::EVENT_DELETE {
                    deleted(&self.key);
                } else {
                    info!(
                        key = self.key,
                        revision = kv.mod_revision,
                        "etcd configuration key changed"
                    );
                    apply(server, &origin, parse(&kv.value));
                }
                *next = (*next).max(kv.mod_revision + 1);
            }
        }
    }
}

fn deleted(key: &str) {
    warn!(
        key,
        "etcd configuration key deleted; still serving the previous configuration"
    );
}

fn parse(value: &[u8]) -> Result<Config, ConfigError> {
    let text = std::str::from_utf8(value)
        .map_err(|e| ConfigError::Repository(format!("the document is not UTF-8: {e}")))?;
    Config::from_yaml(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_that_is_not_utf8_is_refused() {
        let e = parse(b"resources: \xff").unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[tokio::test]
    async fn no_endpoints_is_a_clear_error() {
        let e = EtcdConfigSource::new(&[], "/k").unwrap_err();
        assert!(matches!(
            e,
            EtcdSourceError::Connect(EtcdError::NoEndpoints)
        ));
        assert_eq!(e.to_string(), "no etcd endpoints given");
    }

    #[tokio::test]
    async fn unreachable_etcd_is_an_error_not_a_hang() {
        let source = EtcdConfigSource::new(&["127.0.0.1:1".to_owned()], "/k").unwrap();
        let e = source.load().await.unwrap_err();
        assert!(matches!(e, EtcdSourceError::Etcd { .. }), "{e}");
    }
}
