//! The quota configuration kept in etcd: one key holding the YAML
//! document, read at start-up and written by every admin change, so a
//! restarted server (or another one pointed at the same key) keeps the
//! changes made at run time.
//!
//! # Implementation notes
//!
//! etcd's v3 KV API (`etcdserverpb.KV/Range` and `/Put`) is spoken with
//! the hand-written prost messages the election also uses (`etcd_wire`):
//! two calls, a few fields, and no `protoc` in the build.
//! Every call has a deadline so an unreachable etcd fails the admin
//! request (nothing is applied) rather than hanging it.

use std::fmt;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::etcd_wire as wire;

/// How long one etcd call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A quota configuration document stored under one etcd key.
///
/// # Examples
///
/// ```
/// use tollgate::quota::etcd::EtcdDocument;
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
    channel: Channel,
    key: String,
}

/// Why the document could not be read from or written to etcd.
#[derive(Debug)]
pub enum EtcdDocumentError {
    /// No endpoints were given.
    NoEndpoints,
    /// The key is empty.
    EmptyKey,
    /// An endpoint is not a valid URI.
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why tonic refused it.
        source: tonic::transport::Error,
    },
    /// An etcd call failed or timed out.
    Call {
        /// `range` or `put`.
        op: &'static str,
        /// The key.
        key: String,
        /// etcd's (or the transport's) status.
        source: tonic::Status,
    },
    /// The stored value is not UTF-8.
    NotUtf8 {
        /// The key.
        key: String,
    },
}

impl fmt::Display for EtcdDocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdDocumentError::NoEndpoints => f.write_str("no etcd endpoints given"),
            EtcdDocumentError::EmptyKey => f.write_str("the etcd key is empty"),
            EtcdDocumentError::InvalidEndpoint { endpoint, .. } => {
                write!(f, "invalid etcd endpoint {endpoint:?}")
            }
            EtcdDocumentError::Call { op, key, source } => {
                write!(f, "etcd {op} of {key:?} failed: {}", source.message())
            }
            EtcdDocumentError::NotUtf8 { key } => {
                write!(f, "the value of etcd key {key:?} is not UTF-8")
            }
        }
    }
}

impl std::error::Error for EtcdDocumentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EtcdDocumentError::InvalidEndpoint { source, .. } => Some(source),
            EtcdDocumentError::Call { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl EtcdDocument {
    /// A document under `key` on the etcd cluster at `endpoints`
    /// (`host:port` or URLs). Connects lazily; must be called within a
    /// tokio runtime.
    ///
    /// # Errors
    ///
    /// [`EtcdDocumentError`] for no endpoints, an empty key or an invalid
    /// endpoint.
    pub fn new(endpoints: &[String], key: &str) -> Result<EtcdDocument, EtcdDocumentError> {
        if endpoints.is_empty() {
            return Err(EtcdDocumentError::NoEndpoints);
        }
        if key.is_empty() {
            return Err(EtcdDocumentError::EmptyKey);
        }
        let mut list = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let uri = if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            };
            let endpoint = Endpoint::from_shared(uri)
                .map_err(|source| EtcdDocumentError::InvalidEndpoint {
                    endpoint: e.clone(),
                    source,
                })?
                .connect_timeout(Duration::from_secs(1))
                .timeout(CALL_TIMEOUT);
            list.push(endpoint);
        }
        let channel = if list.len() == 1 {
            list.remove(0).connect_lazy()
        } else {
            Channel::balance_list(list.into_iter())
        };
        Ok(EtcdDocument {
            channel,
            key: key.to_owned(),
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The stored document, `None` if the key does not exist.
    ///
    /// # Errors
    ///
    /// [`EtcdDocumentError::Call`] if etcd cannot be reached or fails;
    /// [`EtcdDocumentError::NotUtf8`] for a value that is not text.
    pub async fn load(&self) -> Result<Option<String>, EtcdDocumentError> {
        let resp: wire::RangeResponse = self
            .unary(
                "range",
                "/etcdserverpb.KV/Range",
                wire::RangeRequest {
                    key: self.key.clone().into_bytes(),
                },
            )
            .await?;
        match resp.kvs.into_iter().next() {
            None => Ok(None),
            Some(kv) => {
                String::from_utf8(kv.value)
                    .map(Some)
                    .map_err(|_| EtcdDocumentError::NotUtf8 {
                        key: self.key.clone(),
                    })
            }
        }
    }

    /// Stores `document`, replacing what was there.
    ///
    /// # Errors
    ///
    /// [`EtcdDocumentError::Call`] if etcd cannot be reached or fails.
    pub async fn save(&self, document: &str) -> Result<(), EtcdDocumentError> {
        let _: wire::PutResponse = self
            .unary(
                "put",
                "/etcdserverpb.KV/Put",
                wire::PutRequest {
                    key: self.key.clone().into_bytes(),
                    value: document.as_bytes().to_vec(),
                },
            )
            .await?;
        Ok(())
    }

    async fn unary<Req, Resp>(
        &self,
        op: &'static str,
        path: &'static str,
        request: Req,
    ) -> Result<Resp, EtcdDocumentError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let failed = |source| EtcdDocumentError::Call {
            op,
            key: self.key.clone(),
            source,
        };
        let call = wire::unary(&self.channel, path, request);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(result) => result.map_err(failed),
            Err(_) => Err(failed(tonic::Status::deadline_exceeded(format!(
                "no answer within {CALL_TIMEOUT:?}"
            )))),
        }
    }
}
