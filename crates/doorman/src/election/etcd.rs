//! Master election on etcd v3: a lease, a campaign on the election key, and
//! an observer that tells followers where the master is.
//!
//! # Implementation notes
//!
//! One task per election runs *sessions*. A session grants an etcd lease of
//! `ttl`, keeps it alive on a `LeaseKeepAlive` stream every `ttl / 3`, and
//! meanwhile campaigns (`v3electionpb.Election/Campaign`) with the lease and
//! this server's advertised address as the value. When the campaign returns,
//! this server is master until the session ends.
//!
//! The session ends when the lease *really* lapses, which the task decides
//! locally: every keep-alive answer moves a deadline to `sent + TTL`, where
//! `sent` is when the request left (so the local deadline is never later than
//! etcd's own expiry, which counts from when etcd received it). Failed
//! keep-alives, broken streams and unreachable endpoints are retried until
//! that deadline; one failed renewal does not cost mastership (Go Doorman's
//! v2 election lost it on the first one). Every wait in the keep-alive loop
//! is bounded by the deadline, so when it passes the session ends at once and
//! the task publishes "not master" before etcd can have elected anyone else.
//! A keep-alive answer with `TTL <= 0` (lease unknown to etcd) ends it too.
//!
//! A second task observes the election key (`Observe`) and records the
//! leader's value, the address followers redirect to. A stale observation of
//! this server's own address is never published as the master's address.
//!
//! With a [`promise`](EtcdConfig::promise), the masters keep a watermark
//! beside the election, under `<key>-watermark` (outside the candidates'
//! prefix `<key>/`): on winning, before publishing "master", a candidate
//! reads it, decides how long its learning mode must last
//! (`watermark.rs`: none on an empty election, none with its leases kept
//! when it wrote the record last itself, else until the stored instant
//! plus [`clock_skew`](EtcdConfig::clock_skew)), and stores `now +
//! promise` (never less than it found) in a transaction conditional on
//! its own candidate key still being there, so that no write of a
//! deposed master lands after a successor read the record. It renews the
//! record every `ttl / 3`; the [`Promise`](super::Promise) it publishes
//! holds the last instant etcd acknowledged, and the server grants no
//! lease past it. A failed renewal leaves the promise as it is (leases
//! shorten as it nears); a refused one (the candidacy is gone) ends the
//! session. The local deadline above still ends mastership whatever the
//! watermark says.
//!
//! Only changes are published on the watch channel: the server starts a new
//! term (learning mode) on every `is_master` value it sees, so a repeated
//! "master" would wrongly restart learning mode.
//!
//! When etcd cannot be reached (a lease grant or a campaign fails), the
//! outage is logged at warn with the retry interval, at its start and then
//! every 30 s, and the election's [`Readiness`] (the server's health)
//! answers not ready until etcd answers again.
//!
//! The sessions and the observer live in `campaign`. The etcd channel,
//! its error and its messages are the service kit's
//! ([`tollgate_service`]), shared with the configuration watch and the quota
//! document store.

mod campaign;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tonic::transport::Channel;
use tracing::{info, warn};

use super::{Election, Mastership};
use campaign::{replace_if_changed, Campaigner, Shared};
use tollgate_service::etcd_wire::{self as wire, unary};
use tollgate_service::LockUnpoisoned;
use tollgate_service::{ClientTls, EtcdError, Outage, Readiness};

/// How an [`Etcd`] election is set up.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd client endpoints, `host:port` or `http://host:port`.
    pub endpoints: Vec<String>,
    /// The election's name (the etcd key prefix candidates campaign on).
    pub key: String,
    /// The lease TTL: how long a master survives without reaching etcd. etcd
    /// rounds it up to whole seconds and enforces a minimum (2 s by default).
    pub ttl: Duration,
    /// This server's gRPC address as clients should dial it (`host:port`).
    pub advertise: String,
    /// How far ahead of now the master's watermark promises: no lease it
    /// grants ends later than the last watermark etcd stored, so it should
    /// cover the longest lease and a renewal (`ttl / 3`) more. Zero turns
    /// the watermark off: every new master runs learning mode in full.
    pub promise: Duration,
    /// The clock skew allowed between servers: a new master learns until
    /// its predecessor's watermark plus this.
    pub clock_skew: Duration,
}

impl EtcdConfig {
    /// How often the lease is renewed: a third of the TTL, at least 100 ms.
    pub fn refresh_interval(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(100))
    }
}

/// Master election on etcd v3.
///
/// Dropping it stops campaigning and publishes "not master" at once; the
/// etcd lease is left to lapse, as if the process had died. Call
/// [`Etcd::resign`] to hand mastership over without waiting for the TTL.
pub struct Etcd {
    tx: Arc<watch::Sender<Mastership>>,
    readiness: Readiness,
    shared: Arc<Mutex<Shared>>,
    channel: Channel,
    tasks: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("mastership", &*self.tx.borrow())
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// Starts campaigning. Connections are made lazily, so an unreachable
    /// etcd is not an error here: the server stays a follower with an
    /// unknown master until etcd answers.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`EtcdError`] for an empty endpoint list, an invalid endpoint or a
    /// TTL under one second.
    pub fn start(config: EtcdConfig) -> Result<Etcd, EtcdError> {
        Etcd::start_with(config, None)
    }

    /// As [`Etcd::start`], reaching etcd over TLS as `tls` says (endpoints
    /// without a scheme as `https://`); the files are read here.
    ///
    /// # Errors
    ///
    /// As [`Etcd::start`], and [`EtcdError::Tls`] naming a TLS file that
    /// cannot be read or holds no PEM certificate or key.
    pub fn start_tls(config: EtcdConfig, tls: &ClientTls) -> Result<Etcd, EtcdError> {
        Etcd::start_with(config, Some(tls))
    }

    fn start_with(config: EtcdConfig, tls: Option<&ClientTls>) -> Result<Etcd, EtcdError> {
        if config.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        if config.ttl < Duration::from_secs(1) {
            return Err(EtcdError::TtlTooShort(config.ttl));
        }
        let channel = tollgate_service::etcd_channel(&config.endpoints, tls)?;
        let readiness = Readiness::default();
        let tx = Arc::new(watch::Sender::new(Mastership::follower(None)));
        let shared = Arc::new(Mutex::new(Shared {
            me: identity(),
            ..Shared::default()
        }));
        let config = Arc::new(config);
        let campaigner = Campaigner {
            config: config.clone(),
            channel: channel.clone(),
            tx: tx.clone(),
            shared: shared.clone(),
            outage: Arc::new(Mutex::new(Outage::new("etcd election", readiness.clone()))),
        };
        let observer = campaigner.clone();
        let tasks = vec![
            tokio::spawn(async move { campaigner.run().await }),
            tokio::spawn(async move { observer.observe().await }),
        ];
        Ok(Etcd {
            tx,
            readiness,
            shared,
            channel,
            tasks,
        })
    }

    /// Stops campaigning and revokes the lease, which deletes this server's
    /// candidate key so another candidate wins at once.
    ///
    /// # Cancel safety
    ///
    /// Mastership is given up before the first await; cancelling only skips
    /// the revoke, and the lease then lapses after its TTL.
    pub async fn resign(mut self) {
        self.stop();
        let lease = self.shared.lock_unpoisoned().lease.take();
        if let Some(id) = lease {
            let call = unary::<wire::LeaseRevokeRequest, wire::LeaseRevokeResponse>(
                &self.channel,
                "/etcdserverpb.Lease/LeaseRevoke",
                wire::LeaseRevokeRequest { id },
            );
            match timeout(Duration::from_secs(2), call).await {
                Ok(Ok(_)) => info!(lease = id, "resigned: lease revoked"),
                Ok(Err(e)) => {
                    let error = tollgate_service::status_line(&e);
                    warn!(lease = id, error, "resign: revoke failed");
                }
                Err(_) => warn!(lease = id, "resign: revoke timed out"),
            }
        }
    }

    fn stop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.shared.lock_unpoisoned().master = false;
        self.tx
            .send_if_modified(|m| replace_if_changed(m, Mastership::follower(None)));
    }
}

/// A random identity for this election in the watermark.
fn identity() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    h.finish()
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Election for Etcd {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.tx.subscribe()
    }

    fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_is_a_third_of_the_ttl() {
        let c = EtcdConfig {
            endpoints: vec!["127.0.0.1:2379".into()],
            key: "k".into(),
            ttl: Duration::from_secs(3),
            advertise: "a:1".into(),
            promise: Duration::ZERO,
            clock_skew: Duration::ZERO,
        };
        assert_eq!(c.refresh_interval(), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn bad_configs_are_refused() {
        let c = EtcdConfig {
            endpoints: vec![],
            key: "k".into(),
            ttl: Duration::from_secs(3),
            advertise: "a:1".into(),
            promise: Duration::ZERO,
            clock_skew: Duration::ZERO,
        };
        assert!(matches!(
            Etcd::start(c.clone()),
            Err(EtcdError::NoEndpoints)
        ));
        let short = EtcdConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            ttl: Duration::from_millis(500),
            ..c
        };
        assert!(matches!(Etcd::start(short), Err(EtcdError::TtlTooShort(_))));
    }

    #[tokio::test]
    async fn unreachable_etcd_leaves_a_follower_that_is_not_ready() {
        let e = Etcd::start(EtcdConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            key: "k".into(),
            ttl: Duration::from_secs(2),
            advertise: "a:1".into(),
            promise: Duration::ZERO,
            clock_skew: Duration::ZERO,
        })
        .unwrap();
        let readiness = e.readiness();
        // The first grant is refused at once; a slow machine gets 30 s.
        for _ in 0..300 {
            if !readiness.is_ready() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!readiness.is_ready());
        assert_eq!(*e.subscribe().borrow(), Mastership::follower(None));
        // Dropping the election ends the outage with its tasks.
        drop(e);
        for _ in 0..300 {
            if readiness.is_ready() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(readiness.is_ready());
    }
}
