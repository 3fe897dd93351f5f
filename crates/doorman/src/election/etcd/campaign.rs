//! The election's two tasks: sessions (a lease kept alive while
//! campaigning, then mastership until the lease lapses) and the observer
//! that records where the master is; and the state they share.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use super::EtcdConfig;
use crate::clock::Timestamp;
use crate::election::watermark::{self, Found, Record};
use crate::election::{Mastership, Promise};
use tollgate_service::etcd_wire::{self as wire, unary};
use tollgate_service::LockUnpoisoned;
use tollgate_service::Outage;

/// What the two tasks share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Whether the current session won the campaign.
    pub(super) master: bool,
    /// The current session's lease id.
    pub(super) lease: Option<i64>,
    /// The leader's address as last observed.
    pub(super) observed: Option<String>,
    /// What the current session publishes while master.
    pub(super) won: Option<Mastership>,
    /// This election's identity in the watermark.
    pub(super) me: u64,
    /// The revision of this election's last write of the watermark.
    pub(super) last_write: Option<i64>,
}

/// Replaces `slot` with `m` unless equal; whether it changed.
pub(super) fn replace_if_changed(slot: &mut Mastership, m: Mastership) -> bool {
    if *slot == m {
        false
    } else {
        *slot = m;
        true
    }
}

/// The state both tasks work with.
#[derive(Debug, Clone)]
pub(super) struct Campaigner {
    pub(super) config: Arc<EtcdConfig>,
    pub(super) channel: Channel,
    pub(super) tx: Arc<watch::Sender<Mastership>>,
    pub(super) shared: Arc<Mutex<Shared>>,
    /// Whether etcd answers, for the log and the server's readiness.
    pub(super) outage: Arc<Mutex<Outage>>,
}

/// Backoff between failed etcd calls outside a session.
const RETRY: Duration = Duration::from_millis(500);

impl Campaigner {
    /// Publishes what [`Shared`] says, if it changed.
    fn publish(&self) {
        let m = {
            let s = self.shared.lock_unpoisoned();
            if s.master {
                s.won
                    .clone()
                    .unwrap_or_else(|| Mastership::master(Some(self.config.advertise.clone())))
            } else {
                Mastership::follower(s.observed.clone().filter(|a| *a != self.config.advertise))
            }
        };
        let is_master = m.is_master;
        if self.tx.send_if_modified(|slot| replace_if_changed(slot, m)) {
            info!(is_master, "etcd election: mastership changed");
        }
    }

    /// Records a failed call to etcd, retried after `retry_in`: logged at
    /// warn at the start of an outage and every 30 s while it lasts, at
    /// debug otherwise.
    fn unreachable(&self, error: &dyn std::fmt::Display, retry_in: Duration) {
        if !self.outage.lock_unpoisoned().failed(error, retry_in) {
            debug!(error = %error, retry_in = ?retry_in, "etcd election call failed; retrying");
        }
    }

    /// Runs sessions forever.
    pub(super) async fn run(self) {
        loop {
            let ttl = self.config.ttl.as_secs().max(1) as i64;
            let sent = Instant::now();
            let grant = unary::<wire::LeaseGrantRequest, wire::LeaseGrantResponse>(
                &self.channel,
                "/etcdserverpb.Lease/LeaseGrant",
                wire::LeaseGrantRequest { ttl, id: 0 },
            );
            let lease = match timeout(self.config.ttl, grant).await {
                Ok(Ok(r)) if r.ttl > 0 && r.error.is_empty() => {
                    self.outage.lock_unpoisoned().answered();
                    r
                }
                Ok(Ok(r)) => {
                    self.outage.lock_unpoisoned().answered();
                    warn!(error = r.error, "etcd refused a lease");
                    sleep(RETRY).await;
                    continue;
                }
                Ok(Err(e)) => {
                    let line = tollgate_service::status_line(&e);
                    let at = self.config.endpoints.join(",");
                    self.unreachable(&format_args!("lease grant at {at}: {line}"), RETRY);
                    sleep(RETRY).await;
                    continue;
                }
                Err(_) => {
                    let why = format_args!("lease grant: no answer within {:?}", self.config.ttl);
                    self.unreachable(&why, Duration::ZERO);
                    continue;
                }
            };
            let deadline = sent + Duration::from_secs(lease.ttl as u64);
            self.shared.lock_unpoisoned().lease = Some(lease.id);
            debug!(lease = lease.id, ttl = lease.ttl, "etcd session starts");
            tokio::select! {
                () = self.keep_alive(lease.id, deadline) => {}
                () = self.campaign(lease.id) => {}
            }
            {
                let mut s = self.shared.lock_unpoisoned();
                s.master = false;
                s.lease = None;
                s.won = None;
            }
            self.publish();
            info!(lease = lease.id, "etcd session ended");
        }
    }

    /// Keeps lease `id` alive; returns when it has lapsed (locally: at
    /// `deadline`, moved on by every answer) or etcd no longer knows it.
    async fn keep_alive(&self, id: i64, mut deadline: Instant) {
        let interval = self.config.refresh_interval();
        let path = PathAndQuery::from_static("/etcdserverpb.Lease/LeaseKeepAlive");
        while Instant::now() < deadline {
            let (req_tx, req_rx) = mpsc::channel::<wire::LeaseKeepAliveRequest>(1);
            let mut grpc = tonic::client::Grpc::new(self.channel.clone());
            let open = async {
                grpc.ready().await.map_err(|e| e.to_string())?;
                grpc.streaming(
                    tonic::Request::new(ReceiverStream::new(req_rx)),
                    path.clone(),
                    tonic_prost::ProstCodec::<
                        wire::LeaseKeepAliveRequest,
                        wire::LeaseKeepAliveResponse,
                    >::default(),
                )
                .await
                .map_err(|e| e.to_string())
            };
            // The stream opens only once the first request is sent.
            let _ = req_tx.try_send(wire::LeaseKeepAliveRequest { id });
            let mut sent = Instant::now();
            let mut stream = match timeout_at(deadline, open).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(e)) => {
                    debug!(error = e, "etcd keep-alive stream failed to open");
                    let _ = timeout_at(deadline, sleep(interval.min(RETRY))).await;
                    continue;
                }
                Err(_) => return,
            };
            loop {
                let wait = deadline.min(sent + interval);
                match timeout_at(wait, stream.message()).await {
                    Ok(Ok(Some(r))) if r.ttl <= 0 => {
                        warn!(lease = id, "etcd lease is gone");
                        return;
                    }
                    Ok(Ok(Some(r))) => {
                        deadline = sent + Duration::from_secs(r.ttl as u64);
                        sleep_until(sent + interval).await;
                    }
                    Ok(Ok(None)) | Ok(Err(_)) => {
                        debug!(lease = id, "etcd keep-alive stream broke");
                        break;
                    }
                    // No answer within the interval: ask again on the same
                    // stream unless the lease has lapsed.
                    Err(_) if Instant::now() >= deadline => return,
                    Err(_) => {}
                }
                sent = Instant::now();
                if req_tx
                    .send(wire::LeaseKeepAliveRequest { id })
                    .await
                    .is_err()
                {
                    break;
                }
            }
            let _ = timeout_at(deadline, sleep(interval.min(RETRY))).await;
        }
    }

    /// Campaigns with lease `id` until elected, then stays master until the
    /// session ends (this future completes only when the watermark shows
    /// the candidacy is gone).
    async fn campaign(&self, id: i64) {
        let leader = loop {
            let call = unary::<wire::CampaignRequest, wire::CampaignResponse>(
                &self.channel,
                "/v3electionpb.Election/Campaign",
                wire::CampaignRequest {
                    name: self.config.key.clone().into_bytes(),
                    lease: id,
                    value: self.config.advertise.clone().into_bytes(),
                },
            );
            match call.await {
                Ok(r) => break r.leader,
                Err(e) => {
                    let line = tollgate_service::status_line(&e);
                    let at = self.config.endpoints.join(",");
                    self.unreachable(&format_args!("campaign at {at}: {line}"), RETRY);
                    sleep(RETRY).await;
                }
            }
        };
        let address = Some(self.config.advertise.clone());
        let watermark = match leader {
            Some(leader) if !self.config.promise.is_zero() => Some(leader),
            _ => None,
        };
        let Some(leader) = watermark else {
            // No watermark: learning mode in full, as before.
            {
                let mut s = self.shared.lock_unpoisoned();
                s.master = true;
                s.won = Some(Mastership::master(address));
            }
            self.publish();
            return std::future::pending::<()>().await;
        };
        // Read the watermark and store ours before the first grant.
        let (won, mut record, promise) = loop {
            match self.won(&leader, address.clone()).await {
                Ok(Some(won)) => break won,
                Ok(None) => return,
                Err(e) => {
                    self.unreachable(&format_args!("watermark: {e}"), RETRY);
                    sleep(RETRY).await;
                }
            }
        };
        {
            let mut s = self.shared.lock_unpoisoned();
            s.master = true;
            s.won = Some(won);
        }
        self.publish();
        loop {
            sleep(self.config.refresh_interval()).await;
            let found = Found::Record(record, 0);
            let until = truncate(watermark::next(found, wall_now(), self.config.promise));
            match self.store(&leader, until).await {
                Ok(Some(r)) => {
                    record = r;
                    promise.set(until);
                }
                // The candidacy is gone: the session ends.
                Ok(None) => return,
                // The promise stands; leases shorten until etcd answers or
                // the session ends.
                Err(e) => debug!(error = %e, "etcd watermark renewal failed"),
            }
        }
    }

    /// The mastership to publish on winning as `leader`, from the
    /// watermark read now, with the stored record and the promise; `None`
    /// if the candidacy is gone.
    async fn won(
        &self,
        leader: &wire::LeaderKey,
        address: Option<String>,
    ) -> Result<Option<(Mastership, Record, Promise)>, tonic::Status> {
        let read = unary::<wire::RangeRequest, wire::RangeResponse>(
            &self.channel,
            "/etcdserverpb.KV/Range",
            wire::RangeRequest {
                key: self.watermark_key(),
            },
        )
        .await?;
        let found = match read.kvs.first() {
            None => Found::Empty,
            Some(kv) => match Record::decode(&kv.value) {
                Some(r) => Found::Record(r, kv.mod_revision),
                None => Found::Unreadable,
            },
        };
        let (me, last_write) = {
            let s = self.shared.lock_unpoisoned();
            (s.me, s.last_write)
        };
        let won = watermark::won(address, found, me, last_write, self.config.clock_skew);
        let until = truncate(watermark::next(found, wall_now(), self.config.promise));
        let Some(record) = self.store(leader, until).await? else {
            return Ok(None);
        };
        info!(
            ?found,
            learning_until = ?won.learning_until,
            keeps_leases = won.keeps_leases,
            "etcd election won; watermark stored"
        );
        let promise = Promise::new(until);
        Ok(Some((won.promising(promise.clone()), record, promise)))
    }

    /// Stores the watermark `until` while `leader` still holds the
    /// election; `None` if it no longer does.
    async fn store(
        &self,
        leader: &wire::LeaderKey,
        until: Timestamp,
    ) -> Result<Option<Record>, tonic::Status> {
        let me = self.shared.lock_unpoisoned().me;
        let record = Record { until, writer: me };
        let r = unary::<wire::TxnRequest, wire::TxnResponse>(
            &self.channel,
            "/etcdserverpb.KV/Txn",
            wire::TxnRequest {
                compare: vec![wire::Compare::created_at(leader.key.clone(), leader.rev)],
                success: vec![wire::RequestOp {
                    request_put: Some(wire::PutRequest {
                        key: self.watermark_key(),
                        value: record.encode(),
                    }),
                }],
            },
        )
        .await?;
        if !r.succeeded {
            warn!("etcd election: candidacy gone; watermark not stored");
            return Ok(None);
        }
        let revision = r.header.map(|h| h.revision);
        self.shared.lock_unpoisoned().last_write = revision;
        Ok(Some(record))
    }

    /// Where the watermark lives: beside the election's key prefix.
    fn watermark_key(&self) -> Vec<u8> {
        format!("{}-watermark", self.config.key).into_bytes()
    }

    /// Follows the election key's leader forever.
    pub(super) async fn observe(self) {
        let path = PathAndQuery::from_static("/v3electionpb.Election/Observe");
        loop {
            let mut grpc = tonic::client::Grpc::new(self.channel.clone());
            let open = async {
                grpc.ready().await.map_err(|e| e.to_string())?;
                grpc.server_streaming(
                    tonic::Request::new(wire::LeaderRequest {
                        name: self.config.key.clone().into_bytes(),
                    }),
                    path.clone(),
                    tonic_prost::ProstCodec::<wire::LeaderRequest, wire::LeaderResponse>::default(),
                )
                .await
                .map_err(|e| e.to_string())
            };
            match open.await {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    while let Ok(Some(r)) = stream.message().await {
                        if let Some(kv) = r.kv {
                            let leader = String::from_utf8_lossy(&kv.value).into_owned();
                            debug!(leader, "etcd election: leader observed");
                            self.shared.lock_unpoisoned().observed = Some(leader);
                            self.publish();
                        }
                    }
                }
                Err(e) => debug!(error = e, "etcd observe failed"),
            }
            sleep(RETRY).await;
        }
    }
}

/// Unix time now.
fn wall_now() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// `t` in whole milliseconds, as the watermark stores it.
fn truncate(t: Timestamp) -> Timestamp {
    Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}
