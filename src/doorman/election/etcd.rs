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
//! Only changes are published on the watch channel: the server starts a new
//! term (learning mode) on every `is_master` value it sees, so a repeated
//! "master" would wrongly restart learning mode.
//!
//! The etcd API is spoken with hand-written prost messages over tonic's
//! generic client (the `wire` module): the messages are few and small, and
//! this keeps the build free of `protoc`, which the maintained `etcd-client`
//! crate's build script needs.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use super::{Election, Mastership};

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
}

impl EtcdConfig {
    /// How often the lease is renewed: a third of the TTL, at least 100 ms.
    pub fn refresh_interval(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(100))
    }
}

/// Why an [`Etcd`] election could not start.
#[derive(Debug)]
pub enum EtcdError {
    /// No endpoints were given.
    NoEndpoints,
    /// An endpoint is not a valid URI.
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why tonic refused it.
        source: tonic::transport::Error,
    },
    /// The TTL is under one second.
    TtlTooShort(Duration),
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::NoEndpoints => f.write_str("no etcd endpoints given"),
            EtcdError::InvalidEndpoint { endpoint, .. } => {
                write!(f, "invalid etcd endpoint {endpoint:?}")
            }
            EtcdError::TtlTooShort(ttl) => {
                write!(f, "election ttl {ttl:?} is under one second")
            }
        }
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EtcdError::InvalidEndpoint { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Master election on etcd v3.
///
/// Dropping it stops campaigning and publishes "not master" at once; the
/// etcd lease is left to lapse, as if the process had died. Call
/// [`Etcd::resign`] to hand mastership over without waiting for the TTL.
pub struct Etcd {
    tx: Arc<watch::Sender<Mastership>>,
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

/// What the two tasks share.
#[derive(Debug, Default)]
struct Shared {
    /// Whether the current session won the campaign.
    master: bool,
    /// The current session's lease id.
    lease: Option<i64>,
    /// The leader's address as last observed.
    observed: Option<String>,
}

fn shared(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
        if config.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        if config.ttl < Duration::from_secs(1) {
            return Err(EtcdError::TtlTooShort(config.ttl));
        }
        let mut endpoints = Vec::new();
        for e in &config.endpoints {
            let uri = if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            };
            let endpoint = Endpoint::from_shared(uri)
                .map_err(|source| EtcdError::InvalidEndpoint {
                    endpoint: e.clone(),
                    source,
                })?
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true);
            endpoints.push(endpoint);
        }
        let channel = if endpoints.len() == 1 {
            endpoints.remove(0).connect_lazy()
        } else {
            Channel::balance_list(endpoints.into_iter())
        };
        let tx = Arc::new(watch::Sender::new(Mastership::follower(None)));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let config = Arc::new(config);
        let campaigner = Campaigner {
            config: config.clone(),
            channel: channel.clone(),
            tx: tx.clone(),
            shared: shared.clone(),
        };
        let observer = campaigner.clone();
        let tasks = vec![
            tokio::spawn(async move { campaigner.run().await }),
            tokio::spawn(async move { observer.observe().await }),
        ];
        Ok(Etcd {
            tx,
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
        let lease = shared(&self.shared).lease.take();
        if let Some(id) = lease {
            let call = unary::<wire::LeaseRevokeRequest, wire::LeaseRevokeResponse>(
                &self.channel,
                "/etcdserverpb.Lease/LeaseRevoke",
                wire::LeaseRevokeRequest { id },
            );
            match timeout(Duration::from_secs(2), call).await {
                Ok(Ok(_)) => info!(lease = id, "resigned: lease revoked"),
                Ok(Err(e)) => warn!(lease = id, error = %e, "resign: revoke failed"),
                Err(_) => warn!(lease = id, "resign: revoke timed out"),
            }
        }
    }

    fn stop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        shared(&self.shared).master = false;
        self.tx
            .send_if_modified(|m| replace_if_changed(m, Mastership::follower(None)));
    }
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
}

fn replace_if_changed(slot: &mut Mastership, m: Mastership) -> bool {
    if *slot == m {
        false
    } else {
        *slot = m;
        true
    }
}

/// The state both tasks work with.
#[derive(Debug, Clone)]
struct Campaigner {
    config: Arc<EtcdConfig>,
    channel: Channel,
    tx: Arc<watch::Sender<Mastership>>,
    shared: Arc<Mutex<Shared>>,
}

/// Backoff between failed etcd calls outside a session.
const RETRY: Duration = Duration::from_millis(500);

impl Campaigner {
    /// Publishes what [`Shared`] says, if it changed.
    fn publish(&self) {
        let m = {
            let s = shared(&self.shared);
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

    /// Runs sessions forever.
    async fn run(self) {
        loop {
            let ttl = self.config.ttl.as_secs().max(1) as i64;
            let sent = Instant::now();
            let grant = unary::<wire::LeaseGrantRequest, wire::LeaseGrantResponse>(
                &self.channel,
                "/etcdserverpb.Lease/LeaseGrant",
                wire::LeaseGrantRequest { ttl, id: 0 },
            );
            let lease = match timeout(self.config.ttl, grant).await {
                Ok(Ok(r)) if r.ttl > 0 && r.error.is_empty() => r,
                Ok(Ok(r)) => {
                    warn!(error = r.error, "etcd refused a lease");
                    sleep(RETRY).await;
                    continue;
                }
                Ok(Err(e)) => {
                    debug!(error = %e, "etcd lease grant failed");
                    sleep(RETRY).await;
                    continue;
                }
                Err(_) => {
                    debug!("etcd lease grant timed out");
                    continue;
                }
            };
            let deadline = sent + Duration::from_secs(lease.ttl as u64);
            shared(&self.shared).lease = Some(lease.id);
            debug!(lease = lease.id, ttl = lease.ttl, "etcd session starts");
            tokio::select! {
                () = self.keep_alive(lease.id, deadline) => {}
                () = self.campaign(lease.id) => {}
            }
            {
                let mut s = shared(&self.shared);
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
                    debug!(error = %e, "etcd campaign failed; retrying");
                    sleep(RETRY).await;
                }
            }
        }
        shared(&self.shared).master = true;
        self.publish();
        std::future::pending::<()>().await;
    }

    /// Follows the election key's leader forever.
    async fn observe(self) {
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
                            shared(&self.shared).observed = Some(leader);
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

/// One unary call to etcd.
async fn unary<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::<Req, Resp>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// The few etcd v3 messages the election speaks, field numbers from etcd's
/// `rpc.proto`, `kv.proto` and `v3election.proto`. Response headers are left
/// out: prost skips fields it does not know.
#[allow(missing_docs, unreachable_pub, clippy::derive_partial_eq_without_eq)]
mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseGrantRequest {
        #[prost(int64, tag = "1")]
        pub ttl: i64,
        #[prost(int64, tag = "2")]
        pub id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseGrantResponse {
        #[prost(int64, tag = "2")]
        pub id: i64,
        #[prost(int64, tag = "3")]
        pub ttl: i64,
        #[prost(string, tag = "4")]
        pub error: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseKeepAliveRequest {
        #[prost(int64, tag = "1")]
        pub id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseKeepAliveResponse {
        #[prost(int64, tag = "2")]
        pub id: i64,
        #[prost(int64, tag = "3")]
        pub ttl: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseRevokeRequest {
        #[prost(int64, tag = "1")]
        pub id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseRevokeResponse {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CampaignRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
        #[prost(int64, tag = "2")]
        pub lease: i64,
        #[prost(bytes = "vec", tag = "3")]
        pub value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaderKey {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub key: Vec<u8>,
        #[prost(int64, tag = "3")]
        pub rev: i64,
        #[prost(int64, tag = "4")]
        pub lease: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CampaignResponse {
        #[prost(message, optional, tag = "2")]
        pub leader: Option<LeaderKey>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaderRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
        #[prost(int64, tag = "6")]
        pub lease: i64,
        #[prost(bytes = "vec", tag = "5")]
        pub value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaderResponse {
        #[prost(message, optional, tag = "2")]
        pub kv: Option<KeyValue>,
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
    async fn unreachable_etcd_leaves_a_follower() {
        let e = Etcd::start(EtcdConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            key: "k".into(),
            ttl: Duration::from_secs(2),
            advertise: "a:1".into(),
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*e.subscribe().borrow(), Mastership::follower(None));
    }
}
