//! Hot reload from an etcd key, watched: every change put there is
//! applied to a service ([`Reload`]) as a file reload is, a valid document
//! put in force, an invalid one logged and refused. A deleted key keeps
//! the current configuration and logs a warning.
//!
//! # Implementation notes
//!
//! The watch starts from the revision after the one the configuration was
//! read at, so no change is missed. After an etcd failure it reconnects
//! with exponential backoff (100 ms doubling to 5 s) and resumes from the
//! revision after the last change it saw; if etcd has compacted that
//! history away, the key is read afresh. An outage is logged at its start
//! and then every 30 s ([`Outage`]), and the server is not ready while it
//! lasts.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::sleep;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info, warn};

use super::{wire, EtcdKey, Outage, Readiness};
use crate::reload::{apply_config, rejected, Reload};

/// The first wait before reconnecting a failed watch.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait before reconnecting a failed watch.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Spawns a task that watches `key` for changes after `revision` and
/// applies each to `target`, until the task is aborted; an etcd outage
/// makes `readiness` not ready while it lasts.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn watch_key<R: Reload>(
    key: EtcdKey,
    target: R,
    revision: i64,
    readiness: Readiness,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = Watch {
            origin: format!("etcd:{}", key.key()),
            key,
            target,
            next: revision + 1,
            backoff: MIN_BACKOFF,
            outage: Outage::new("etcd configuration watch", readiness),
        };
        loop {
            let why = watch.once().await;
            let backoff = watch.backoff;
            if !watch.outage.failed(&why, backoff) {
                debug!(key = watch.key.key(), error = why, retry_in = ?backoff, "etcd configuration watch failed; reconnecting");
            }
            sleep(backoff).await;
            watch.backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })
}

/// A watch of one key, and where it stands.
struct Watch<R> {
    key: EtcdKey,
    /// The key, as the log names where a configuration came from.
    origin: String,
    target: R,
    /// The revision to watch from.
    next: i64,
    backoff: Duration,
    outage: Outage,
}

impl<R: Reload> Watch<R> {
    /// One watch stream from revision `next`, applying every change and
    /// moving `next` past it; returns why the stream ended.
    async fn once(&mut self) -> String {
        let (tx, rx) = mpsc::channel::<wire::WatchRequest>(1);
        // The stream opens only once the first request is sent.
        let _ = tx.try_send(wire::WatchRequest {
            create_request: Some(wire::WatchCreateRequest {
                key: self.key.key().as_bytes().to_vec(),
                start_revision: self.next,
            }),
        });
        let mut grpc = tonic::client::Grpc::new(self.key.channel().clone());
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
            Err(e) => return crate::status_line(&e),
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return "the watch stream ended".to_owned(),
                Err(e) => return crate::status_line(&e),
            };
            if response.created {
                debug!(
                    key = self.key.key(),
                    from = self.next,
                    "watching the etcd configuration key"
                );
                self.backoff = MIN_BACKOFF;
                self.outage.answered();
            }
            if response.compact_revision > 0 {
                warn!(
                    key = self.key.key(),
                    compacted = response.compact_revision,
                    "etcd compacted the history being watched; reading the key afresh"
                );
                return match self.key.read().await {
                    Ok((value, revision)) => {
                        match value {
                            Some(value) => self.apply(value),
                            None => self.deleted(),
                        }
                        self.next = revision + 1;
                        self.backoff = MIN_BACKOFF;
                        "restarting the watch after compaction".to_owned()
                    }
                    Err(e) => e.to_string(),
                };
            }
            if response.canceled {
                return format!("etcd cancelled the watch: {}", response.cancel_reason);
            }
            for event in response.events {
                let Some(kv) = event.kv else { continue };
                if event.r#type == wire::EVENT_DELETE {
                    self.deleted();
                } else {
                    info!(
                        key = self.key.key(),
                        revision = kv.mod_revision,
                        "etcd configuration key changed"
                    );
                    self.apply(kv.value);
                }
                self.next = self.next.max(kv.mod_revision + 1);
            }
        }
    }

    /// Applies a value put at the key.
    fn apply(&self, value: Vec<u8>) {
        match self.key.text(value) {
            Ok(text) => {
                apply_config(&self.target, &self.origin, R::parse(&text));
            }
            Err(e) => rejected(&self.target, &self.origin, &e),
        }
    }

    fn deleted(&self) {
        warn!(
            key = self.key.key(),
            "etcd configuration key deleted; still serving the previous configuration"
        );
    }
}
