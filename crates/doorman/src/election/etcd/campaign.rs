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
use crate::election::Mastership;
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
                Mastership::master(Some(self.config.advertise.clone()))
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
    /// session ends (this future never completes).
    async fn campaign(&self, id: i64) {
        loop {
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
                Ok(_) => break,
                Err(e) => {
                    let line = tollgate_service::status_line(&e);
                    let at = self.config.endpoints.join(",");
                    self.unreachable(&format_args!("campaign at {at}: {line}"), RETRY);
                    sleep(RETRY).await;
                }
            }
        }
        self.shared.lock_unpoisoned().master = true;
        self.publish();
        std::future::pending::<()>().await;
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
