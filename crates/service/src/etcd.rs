//! etcd v3 for every service, in one place: one channel (plaintext or
//! TLS, balanced over several endpoints), one key read and written with a
//! deadline on each call, one error type, and the account of an etcd
//! outage that logs it and marks the server not ready while it lasts.
//! Watching a key for hot reload is `etcd/watch.rs`; the messages are
//! `etcd/wire.rs`.
//!
//! # Implementation notes
//!
//! The channel connects lazily, so an unreachable etcd is never an error
//! when a service starts: it is a failed call later, retried by whoever
//! made it. The channel has no per-request timeout of its own, since the
//! election's keep-alive and the configuration watch are streams that
//! live as long as the server; unary calls are bounded here instead
//! ([`CALL_TIMEOUT`]).

use std::error::Error;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tracing::{info, warn};

use super::readiness::{NotReady, Readiness};
use super::tls::{ClientTls, TlsError};

// The Doorman configuration watch's.
pub(crate) mod watch;
pub(crate) mod wire;

/// How long one unary etcd call may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How often an outage that goes on is logged again.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// Why etcd could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum EtcdError {
    /// No endpoints were given.
    NoEndpoints,
    /// An endpoint is not a valid URI, or tonic refused its TLS setup.
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why tonic refused it.
        source: tonic::transport::Error,
    },
    /// A TLS file cannot be used.
    Tls(TlsError),
    /// The key is empty.
    EmptyKey,
    /// An etcd lease TTL under one second.
    TtlTooShort(Duration),
    /// An etcd call failed or was not answered in time.
    Call {
        /// `range` or `put`.
        op: &'static str,
        /// The key.
        key: String,
        /// The endpoints called, comma-separated.
        endpoints: String,
        /// etcd's (or the transport's) status.
        source: tonic::Status,
    },
    /// The key does not exist.
    Missing {
        /// The key.
        key: String,
    },
    /// The stored value is not UTF-8.
    NotUtf8 {
        /// The key.
        key: String,
    },
    /// The key holds no valid configuration.
    Invalid {
        /// The key.
        key: String,
        /// What is wrong with it.
        source: Box<dyn Error + Send + Sync>,
    },
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::NoEndpoints => f.write_str("no etcd endpoints given"),
            EtcdError::InvalidEndpoint { endpoint, .. } => {
                write!(f, "invalid etcd endpoint {endpoint:?}")
            }
            EtcdError::Tls(_) => f.write_str("cannot reach etcd over TLS"),
            EtcdError::EmptyKey => f.write_str("the etcd key is empty"),
            EtcdError::TtlTooShort(ttl) => {
                write!(f, "etcd lease ttl {ttl:?} is under one second")
            }
            EtcdError::Call {
                op,
                key,
                endpoints,
                source,
            } => write!(
                f,
                "etcd {op} of {key:?} at {endpoints} failed: {}",
                crate::status_line(source)
            ),
            EtcdError::Missing { key } => write!(f, "etcd key {key:?} does not exist"),
            EtcdError::NotUtf8 { key } => {
                write!(f, "the value of etcd key {key:?} is not UTF-8")
            }
            EtcdError::Invalid { key, source } => write!(f, "etcd key {key:?}: {source}"),
        }
    }
}

impl Error for EtcdError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            EtcdError::InvalidEndpoint { source, .. } => Some(source),
            EtcdError::Tls(source) => Some(source),
            // Its cause is already in this error's line: tonic's own
            // Display of a status is a dump of its fields.
            EtcdError::Call { .. } => None,
            // Its message is already in this error's: go on from its causes.
            EtcdError::Invalid { source, .. } => source.source(),
            _ => None,
        }
    }
}

/// A channel to the etcd `endpoints` (`host:port` or URLs; balanced over
/// several), over TLS when `tls` is given (endpoints without a scheme then
/// as `https://`). Connects lazily; must be called within a tokio runtime.
///
/// # Errors
///
/// [`EtcdError`] for no endpoints, an invalid endpoint or a TLS file that
/// cannot be used.
pub fn channel(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Channel, EtcdError> {
    if endpoints.is_empty() {
        return Err(EtcdError::NoEndpoints);
    }
    let tls = tls
        .map(ClientTls::load)
        .transpose()
        .map_err(EtcdError::Tls)?;
    let mut out = Vec::with_capacity(endpoints.len());
    for e in endpoints {
        let uri = match (e.contains("://"), &tls) {
            (true, _) => e.clone(),
            (false, None) => format!("http://{e}"),
            (false, Some(_)) => format!("https://{e}"),
        };
        let invalid = |source| EtcdError::InvalidEndpoint {
            endpoint: e.clone(),
            source,
        };
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(invalid)?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        if let Some(tls) = &tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(invalid)?;
        }
        out.push(endpoint);
    }
    Ok(if out.len() == 1 {
        out.remove(0).connect_lazy()
    } else {
        Channel::balance_list(out.into_iter())
    })
}

/// One etcd key on one channel: read, written and watched.
#[derive(Debug, Clone)]
pub struct EtcdKey {
    channel: Channel,
    key: String,
    /// The endpoints, comma-separated, for error messages.
    endpoints: String,
}

impl EtcdKey {
    /// `key` on the etcd cluster at `endpoints`, over TLS when `tls` is
    /// given; see [`channel`].
    ///
    /// # Errors
    ///
    /// As [`channel`], and [`EtcdError::EmptyKey`].
    pub fn new(
        endpoints: &[String],
        key: impl Into<String>,
        tls: Option<&ClientTls>,
    ) -> Result<EtcdKey, EtcdError> {
        let key = key.into();
        let channel = channel(endpoints, tls)?;
        if key.is_empty() {
            return Err(EtcdError::EmptyKey);
        }
        Ok(EtcdKey {
            channel,
            key,
            endpoints: endpoints.join(","),
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The channel.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// The key's value (`None` if it does not exist) and the store
    /// revision of the read.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Call`] if etcd fails or does not answer within
    /// five seconds.
    pub async fn read(&self) -> Result<(Option<Vec<u8>>, i64), EtcdError> {
        let response: wire::RangeResponse = self
            .unary(
                "range",
                "/etcdserverpb.KV/Range",
                wire::RangeRequest {
                    key: self.key.clone().into_bytes(),
                },
            )
            .await?;
        let revision = response.header.map_or(0, |h| h.revision);
        Ok((response.kvs.into_iter().next().map(|kv| kv.value), revision))
    }

    /// The key's value as text, `None` if it does not exist, and the store
    /// revision of the read.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), and [`EtcdError::NotUtf8`].
    pub async fn read_text(&self) -> Result<(Option<String>, i64), EtcdError> {
        let (value, revision) = self.read().await?;
        let text = value.map(|v| self.text(v)).transpose()?;
        Ok((text, revision))
    }

    /// The key's value as a text document, `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// As [`read_text`](Self::read_text).
    pub async fn load(&self) -> Result<Option<String>, EtcdError> {
        Ok(self.read_text().await?.0)
    }

    /// Stores the text `document`, replacing what was there.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub async fn save(&self, document: &str) -> Result<(), EtcdError> {
        self.put(document.as_bytes()).await
    }

    /// `value` as text.
    ///
    /// # Errors
    ///
    /// [`EtcdError::NotUtf8`].
    pub fn text(&self, value: Vec<u8>) -> Result<String, EtcdError> {
        String::from_utf8(value).map_err(|_| EtcdError::NotUtf8 {
            key: self.key.clone(),
        })
    }

    /// Stores `value`, replacing what was there.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Call`] if etcd fails or does not answer within
    /// five seconds.
    pub async fn put(&self, value: &[u8]) -> Result<(), EtcdError> {
        let _: wire::PutResponse = self
            .unary(
                "put",
                "/etcdserverpb.KV/Put",
                wire::PutRequest {
                    key: self.key.clone().into_bytes(),
                    value: value.to_vec(),
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
    ) -> Result<Resp, EtcdError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let failed = |source| EtcdError::Call {
            op,
            key: self.key.clone(),
            endpoints: self.endpoints.clone(),
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

// The election's and the configuration watch's.
/// One etcd connection's outage, for its log and for [`Readiness`]: a
/// warning at the first failure and then at most one every 30 s while it
/// lasts (with the error, the backoff, how long and how many failures), a
/// line when etcd answers again, and the server not ready meanwhile.
#[derive(Debug)]
pub struct Outage {
    what: &'static str,
    readiness: Readiness,
    /// When the outage began, how many calls failed since, and the server
    /// not ready meanwhile; `None` while etcd answers.
    down: Option<(Instant, u64, NotReady)>,
    /// When the outage may be logged again.
    next_warning: Instant,
}

impl Outage {
    /// An outage of `what` (the log's subject, e.g. "etcd election"),
    /// reported to `readiness`.
    pub fn new(what: &'static str, readiness: Readiness) -> Outage {
        Outage {
            what,
            readiness,
            down: None,
            next_warning: Instant::now(),
        }
    }

    /// Records a failed call, to be retried after `retry_in`. Returns
    /// whether it was logged.
    pub fn failed(&mut self, error: &dyn fmt::Display, retry_in: Duration) -> bool {
        let now = Instant::now();
        let (since, failures) = match &mut self.down {
            Some((since, failures, _)) => {
                *failures += 1;
                (*since, *failures)
            }
            None => {
                self.down = Some((now, 1, self.readiness.not_ready()));
                self.next_warning = now;
                (now, 1)
            }
        };
        if now < self.next_warning {
            return false;
        }
        self.next_warning = now + WARN_EVERY;
        warn!(
            error = %error,
            retry_in = ?retry_in,
            failures,
            down_for = ?now.duration_since(since),
            "{} failed: etcd unreachable; retrying (not ready meanwhile)",
            self.what
        );
        true
    }

    /// Records an answer from etcd; logs the end of an outage. Returns
    /// whether an outage ended.
    pub fn answered(&mut self) -> bool {
        let Some((since, failures, _)) = self.down.take() else {
            return false;
        };
        info!(
            failures,
            down_for = ?since.elapsed(),
            "{}: etcd answers again",
            self.what
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokio's paused clock stands for time; the counts are exact.
    #[tokio::test(start_paused = true)]
    async fn an_outage_warns_at_once_then_every_30_s_and_is_not_ready_while_it_lasts() {
        let readiness = Readiness::default();
        let mut outage = Outage::new("etcd election", readiness.clone());
        assert!(!outage.answered(), "no outage to end");
        assert!(readiness.is_ready());

        // A failure every 500 ms for 61 s: 123 failures, warned at 0, 30
        // and 60 s.
        let mut warned = 0;
        for _ in 0..=122 {
            if outage.failed(&"connection refused", Duration::from_millis(500)) {
                warned += 1;
            }
            assert!(!readiness.is_ready());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(warned, 3);
        assert_eq!(outage.down.as_ref().map(|(_, n, _)| *n), Some(123));

        assert!(outage.answered());
        assert!(readiness.is_ready());
        // A new outage is warned of at once.
        assert!(outage.failed(&"connection refused", Duration::from_millis(500)));
        assert!(!readiness.is_ready());
        // Dropped during an outage, it no longer holds the server back.
        drop(outage);
        assert!(readiness.is_ready());
    }

    #[test]
    fn two_outages_on_one_readiness_both_must_end() {
        let readiness = Readiness::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut election = Outage::new("etcd election", readiness.clone());
            let mut watch = Outage::new("etcd configuration watch", readiness.clone());
            election.failed(&"refused", Duration::ZERO);
            watch.failed(&"refused", Duration::ZERO);
            election.answered();
            assert!(!readiness.is_ready());
            watch.answered();
            assert!(readiness.is_ready());
        });
    }

    #[tokio::test]
    async fn bad_endpoints_and_keys_are_clear_errors() {
        let e = EtcdKey::new(&[], "/k", None).unwrap_err();
        assert_eq!(e.to_string(), "no etcd endpoints given");
        let e = EtcdKey::new(&["127.0.0.1:2379".to_owned()], "", None).unwrap_err();
        assert_eq!(e.to_string(), "the etcd key is empty");
        let e = EtcdKey::new(&["http://bad host".to_owned()], "/k", None).unwrap_err();
        assert_eq!(e.to_string(), "invalid etcd endpoint \"http://bad host\"");
        let e = EtcdKey::new(
            &["127.0.0.1:2379".to_owned()],
            "/k",
            Some(&ClientTls::new("/nonexistent/ca.pem")),
        )
        .unwrap_err();
        assert_eq!(
            crate::ErrorChain(&e).to_string(),
            "cannot reach etcd over TLS: cannot read TLS file /nonexistent/ca.pem: No such file or directory (os error 2)"
        );
    }

    #[tokio::test]
    async fn a_value_that_is_not_utf8_is_refused() {
        let key = EtcdKey::new(&["127.0.0.1:2379".to_owned()], "/k", None).unwrap();
        let e = key.text(b"resources: \xff".to_vec()).unwrap_err();
        assert_eq!(e.to_string(), "the value of etcd key \"/k\" is not UTF-8");
        assert_eq!(
            key.text(b"resources: []".to_vec()).unwrap(),
            "resources: []"
        );
    }

    #[tokio::test]
    async fn an_unreachable_etcd_is_an_error_not_a_hang() {
        let key = EtcdKey::new(&["127.0.0.1:1".to_owned()], "/k", None).unwrap();
        let e = key.read().await.unwrap_err();
        assert!(matches!(e, EtcdError::Call { op: "range", .. }), "{e}");
        // One line, the address and the cause in words: no dump of the
        // status's fields, however the chain is printed.
        let line = crate::ErrorChain(&e).to_string();
        assert_eq!(
            line,
            "etcd range of \"/k\" at 127.0.0.1:1 failed: Unavailable: tcp connect error: \
             Connection refused (os error 111)"
        );
    }
}
