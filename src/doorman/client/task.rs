//! The client's background task: refresh rounds, discovery, failover,
//! expiry and releases.
//!
//! # Implementation notes
//!
//! One loop owns all network I/O. Each turn it (1) sends queued releases,
//! (2) runs a refresh round if one is due, (3) applies lease expiry, then
//! (4) sleeps until the next refresh or the earliest lease expiry, or until
//! a handle wakes it.
//!
//! A round is one GetCapacity carrying every resource. The target is the
//! known master; without one the task asks the current server address with
//! Discovery (a server that does not implement Discovery is taken as the
//! master). A response carrying `mastership` redirects at once to the named
//! master, up to `max_redirects` times in one round; without an address the
//! round fails. A failed RPC (error or deadline) forgets the master and
//! moves to the next address, so an outage of one server costs one round.
//! After a failed round the next waits for the backoff; after a success, for
//! the smallest refresh interval among the leases.
//!
//! Lease expiry times are Unix seconds from the server, compared with the
//! client's [`WallClock`](crate::doorman::clock::WallClock); the wait until an
//! expiry is converted to a tokio deadline, so paused tokio time and a
//! matching clock drive it in tests.
//!
//! Expiry is enforced by time, not by RPC progress: while a round is in
//! flight (a server that accepted the call and went silent holds it for the
//! whole RPC deadline), the loop races the round against the earliest
//! expiry and applies the expiry mode at that instant, then goes on
//! waiting for the round.
//!
//! Every deadline computed from a server's values saturates
//! ([`after`]): a refresh interval or an expiry of `i64::MAX` seconds
//! means "far in the future", never an overflow. The next refresh is also
//! never later than the earliest lease expiry, so a lease with an absurd
//! refresh interval is still renewed before it lapses.
//!
//! The loop runs in a child task watched by [`run`]: should it ever panic,
//! the panic is logged at `error` and the loop restarts after a second with
//! the same resources, so the client never stops silently while its
//! handles keep showing a stale lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::backoff::Retry;
use super::lease::{self, fallback, Capacity, Lease, Source};
use super::{lock, ReleaseError, ReleaseRequest, Shared, Slot};
use crate::doorman::lease::Timestamp;
use crate::doorman::pb;
use crate::doorman::transport::Transport;

/// What the server last granted a resource.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    lease: Option<Lease>,
    safe_capacity: Option<f64>,
    refreshes: u64,
    /// The wants last sent (the optimistic fallback).
    wants: f64,
}

impl Held {
    pub(crate) fn new(wants: f64) -> Held {
        Held {
            lease: None,
            safe_capacity: None,
            refreshes: 0,
            wants,
        }
    }

    /// The lease, if unexpired at `now`.
    fn valid(&self, now: Timestamp) -> Option<Lease> {
        self.lease.filter(|l| l.expiry > now)
    }

    /// The capacity to enforce at `now`.
    fn capacity(&self, slot: &Slot, now: Timestamp) -> Capacity {
        let (capacity, source) = match (self.valid(now), self.lease) {
            (Some(l), _) => (l.capacity, Source::Lease),
            (None, Some(_)) => (
                fallback(slot.mode, self.wants, self.safe_capacity),
                Source::Expired,
            ),
            (None, None) => (
                fallback(slot.mode, self.wants, self.safe_capacity),
                Source::Pending,
            ),
        };
        Capacity {
            capacity,
            source,
            lease: self.lease,
            safe_capacity: self.safe_capacity,
            refreshes: self.refreshes,
        }
    }
}

/// Why a round failed.
#[derive(Debug)]
enum RoundError {
    Rpc { address: String, error: String },
    NoMaster(String),
    Redirects,
}

impl std::fmt::Display for RoundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoundError::Rpc { address, error } => write!(f, "{address}: {error}"),
            RoundError::NoMaster(a) => write!(f, "{a} does not know the master"),
            RoundError::Redirects => f.write_str("too many mastership redirects"),
        }
    }
}

/// The way to the servers and what the task knows about the master.
#[derive(Debug)]
struct Conn {
    servers: Vec<String>,
    /// The configured address to try next when the master is unknown.
    next: usize,
    master: Option<String>,
    transport: Arc<dyn Transport>,
    timeout: Duration,
}

impl Conn {
    /// Forgets the master and, if `address` is the configured address in
    /// use, moves on to the next one. (A master learnt from a redirect is
    /// forgotten, and found again through the configured address.)
    fn fail(&mut self, address: &str) {
        self.transport.forget(address);
        self.master = None;
        if self.servers[self.next] == address {
            self.next = (self.next + 1) % self.servers.len();
        }
    }

    /// The master's address, asking Discovery if it is not known.
    async fn master(&mut self) -> Result<String, RoundError> {
        if let Some(m) = &self.master {
            return Ok(m.clone());
        }
        let address = self.servers[self.next].clone();
        let answer = tokio::time::timeout(self.timeout, self.transport.discovery(&address)).await;
        match answer {
            Ok(Ok(r)) => {
                let named = r.mastership.master_address.filter(|a| !a.is_empty());
                if r.is_master {
                    // The server we reached is the master; its advertised
                    // address may not be reachable from here, so keep ours.
                    self.master = Some(address.clone());
                    return Ok(address);
                }
                match named {
                    Some(m) => {
                        debug!(
                            via = address.as_str(),
                            master = m.as_str(),
                            "discovered master"
                        );
                        self.master = Some(m.clone());
                        Ok(m)
                    }
                    None => {
                        self.fail(&address);
                        Err(RoundError::NoMaster(address))
                    }
                }
            }
            // A server without Discovery answers capacity RPCs or redirects.
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                self.master = Some(address.clone());
                Ok(address)
            }
            Ok(Err(status)) => {
                self.fail(&address);
                Err(RoundError::Rpc {
                    address,
                    error: describe(&status),
                })
            }
            Err(_) => {
                self.fail(&address);
                Err(RoundError::Rpc {
                    address,
                    error: "deadline exceeded".to_owned(),
                })
            }
        }
    }
}

struct Task {
    shared: Arc<Shared>,
    conn: Conn,
    retry: Retry,
    origin: Instant,
}

/// How long a panicked loop waits before it starts again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// About thirty years: what "never" means for a deadline (tokio's own
/// choice for a far-future instant).
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// A failed RPC in one line: the code, the message and the innermost
/// cause (e.g. `Unavailable: tcp connect error: Connection refused (os
/// error 111)`), without tonic's Debug dump of metadata and sources.
pub(crate) fn describe(status: &tonic::Status) -> String {
    let mut line = format!("{:?}", status.code());
    if !status.message().is_empty() {
        line.push_str(": ");
        line.push_str(status.message());
    }
    let mut cause = std::error::Error::source(status);
    let mut innermost = None;
    while let Some(c) = cause {
        innermost = Some(c);
        cause = c.source();
    }
    if let Some(c) = innermost {
        let c = c.to_string();
        if !line.ends_with(c.as_str()) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}

/// The tokio instant `d` from now, saturating at [`FAR_FUTURE`] rather
/// than overflowing on a huge server-provided duration.
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d.min(FAR_FUTURE))
        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(now)
}

/// Sleeps until `at`, or forever when there is no deadline.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs the client until it is closed, restarting the loop if it panics.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        let attempt = tokio::spawn(run_once(shared.clone()));
        match attempt.await {
            Ok(()) => return,
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                error!(
                    client = shared.id.as_str(),
                    panic = message.as_str(),
                    restart_in = ?RESTART_DELAY,
                    "lease client task panicked; restarting it"
                );
                tokio::time::sleep(RESTART_DELAY).await;
            }
            // Cancelled: the runtime is shutting down.
            Err(_) => return,
        }
    }
}

/// One life of the client's loop.
async fn run_once(shared: Arc<Shared>) {
    let config = &shared.config;
    let mut task = Task {
        conn: Conn {
            servers: config.servers.clone(),
            next: 0,
            master: None,
            transport: config.transport.clone(),
            timeout: config.rpc_timeout,
        },
        retry: Retry::new(config.backoff, config.seed),
        origin: Instant::now(),
        shared: shared.clone(),
    };
    task.run().await;
}

impl Task {
    async fn run(&mut self) {
        let mut next_refresh = Instant::now();
        loop {
            let (slots, releases, urgent, closing) = {
                let mut state = lock(&self.shared.state);
                let urgent = std::mem::take(&mut state.urgent);
                (
                    state.slots.values().cloned().collect::<Vec<_>>(),
                    std::mem::take(&mut state.releases),
                    urgent,
                    state.closing,
                )
            };
            if !releases.is_empty() {
                self.release(releases).await;
            }
            if closing && slots.is_empty() {
                debug!(client = self.shared.id.as_str(), "lease client stopped");
                return;
            }
            // A new resource is asked for at once, unless backing off.
            if urgent && self.retry.failures() == 0 {
                next_refresh = Instant::now();
            }
            if !slots.is_empty() && Instant::now() >= next_refresh {
                let shared = self.shared.clone();
                let outcome = {
                    let round = self.round(&slots);
                    tokio::pin!(round);
                    loop {
                        // Expiry does not wait for a slow or silent server.
                        let wake = expire(&shared, &slots);
                        tokio::select! {
                            biased;
                            r = &mut round => break r,
                            () = sleep_until(wake) => {}
                        }
                    }
                };
                next_refresh = match outcome {
                    Ok(interval) => {
                        self.retry.reset();
                        after(interval)
                    }
                    Err(e) => {
                        let delay = self.retry.next_delay();
                        warn!(
                            client = self.shared.id.as_str(),
                            error = %e,
                            failures = self.retry.failures(),
                            retry_in = ?delay,
                            "capacity refresh failed"
                        );
                        after(delay)
                    }
                };
            }
            let wake = expire(&self.shared, &slots).map_or(next_refresh, |e| e.min(next_refresh));
            if slots.is_empty() {
                self.shared.wake.notified().await;
            } else {
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(wake) => {}
                    () = self.shared.wake.notified() => {}
                }
            }
        }
    }

    /// One refresh round; returns the interval until the next.
    async fn round(&mut self, slots: &[Arc<Slot>]) -> Result<Duration, RoundError> {
        let now = self.shared.config.clock.now();
        let since = self.origin.elapsed();
        let mut resources = Vec::with_capacity(slots.len());
        for slot in slots {
            let wants = slot.wants(since);
            let mut held = lock(&slot.held);
            held.wants = wants;
            resources.push(pb::ResourceRequest {
                resource_id: slot.id.clone(),
                priority: slot.priority,
                has: held.valid(now).map(Lease::to_pb),
                wants,
            });
        }
        let message = pb::GetCapacityRequest {
            client_id: self.shared.id.clone(),
            resource: resources,
        };
        for _ in 0..=self.shared.config.max_redirects {
            let address = self.conn.master().await?;
            let call = self.conn.transport.get_capacity(&address, message.clone());
            let answer = tokio::time::timeout(self.conn.timeout, call).await;
            let response = match answer {
                Ok(Ok(r)) => r,
                Ok(Err(status)) => {
                    self.conn.fail(&address);
                    return Err(RoundError::Rpc {
                        address,
                        error: describe(&status),
                    });
                }
                Err(_) => {
                    self.conn.fail(&address);
                    return Err(RoundError::Rpc {
                        address,
                        error: "deadline exceeded".to_owned(),
                    });
                }
            };
            if let Some(m) = response.mastership {
                match m.master_address.filter(|a| !a.is_empty()) {
                    Some(master) => {
                        info!(
                            from = address.as_str(),
                            to = master.as_str(),
                            "mastership redirect"
                        );
                        self.conn.master = Some(master);
                        continue;
                    }
                    None => {
                        self.conn.fail(&address);
                        return Err(RoundError::NoMaster(address));
                    }
                }
            }
            return Ok(self.apply(slots, &response.response));
        }
        self.conn.master = None;
        Err(RoundError::Redirects)
    }

    /// Applies a master's answers; returns the next refresh interval.
    fn apply(&self, slots: &[Arc<Slot>], responses: &[pb::ResourceResponse]) -> Duration {
        let config = &self.shared.config;
        let now = config.clock.now();
        let by_id: HashMap<&str, &Arc<Slot>> = slots.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut answered = HashMap::new();
        for r in responses {
            let Some(slot) = by_id.get(r.resource_id.as_str()) else {
                warn!(
                    resource = r.resource_id.as_str(),
                    "answer for a resource not asked for; ignored"
                );
                continue;
            };
            match lease::check(r, now, config.min_refresh) {
                Ok(checked) => {
                    for repair in &checked.repairs {
                        warn!(
                            resource = slot.id.as_str(),
                            "bad answer from server: {repair}"
                        );
                    }
                    let mut held = lock(&slot.held);
                    held.lease = Some(checked.lease);
                    if checked.safe_capacity.is_some() {
                        held.safe_capacity = checked.safe_capacity;
                    }
                    held.refreshes += 1;
                    let capacity = held.capacity(slot, now);
                    drop(held);
                    answered.insert(slot.id.as_str(), ());
                    publish(slot, capacity);
                }
                Err(refused) => {
                    warn!(
                        resource = slot.id.as_str(),
                        "bad answer from server ignored: {refused}"
                    );
                }
            }
        }
        let mut interval: Option<Duration> = None;
        for slot in slots {
            if !answered.contains_key(slot.id.as_str()) {
                debug!(
                    resource = slot.id.as_str(),
                    "no usable answer for resource this round"
                );
            }
            if let Some(l) = lock(&slot.held).lease {
                // Ask again before the lease lapses, whatever the server's
                // refresh interval (`min_refresh` still bounds the rate).
                let until_expiry = l.expiry.saturating_sub(now);
                let due = l.refresh_interval.min(until_expiry);
                interval = Some(interval.map_or(due, |i| i.min(due)));
            }
        }
        interval
            .unwrap_or(config.idle_refresh)
            .max(config.min_refresh)
    }

    /// Sends one ReleaseCapacity for `releases` and tells the waiters.
    async fn release(&mut self, releases: Vec<ReleaseRequest>) {
        let ids: Vec<String> = releases.iter().map(|r| r.id.clone()).collect();
        let result = self.release_ids(ids).await;
        if let Err(e) = &result {
            warn!(client = self.shared.id.as_str(), error = %e, "release failed");
        }
        for r in releases {
            if let Some(done) = r.done {
                let _ = done.send(result.clone());
            }
        }
    }

    async fn release_ids(&mut self, ids: Vec<String>) -> Result<(), ReleaseError> {
        let unreachable = |e: RoundError| ReleaseError::Unreachable(e.to_string());
        let address = self.conn.master().await.map_err(unreachable)?;
        let call = self.conn.transport.release_capacity(
            &address,
            pb::ReleaseCapacityRequest {
                client_id: self.shared.id.clone(),
                resource_id: ids,
            },
        );
        match tokio::time::timeout(self.conn.timeout, call).await {
            // A redirect needs no retry: the new master holds no lease of
            // ours.
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => {
                self.conn.fail(&address);
                Err(ReleaseError::Unreachable(format!("{address}: {status}")))
            }
            Err(_) => {
                self.conn.fail(&address);
                Err(ReleaseError::Unreachable(format!(
                    "{address}: deadline exceeded"
                )))
            }
        }
    }
}

/// Publishes the capacity of every slot whose lease has expired and
/// returns the earliest future expiry as a tokio deadline.
fn expire(shared: &Shared, slots: &[Arc<Slot>]) -> Option<Instant> {
    let now = shared.config.clock.now();
    let mut earliest: Option<Instant> = None;
    for slot in slots {
        let held = lock(&slot.held);
        match held.lease {
            Some(l) if l.expiry > now => {
                let at = after(l.expiry - now);
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
            _ => {
                let capacity = held.capacity(slot, now);
                if slot.tx.borrow().source == Source::Lease {
                    info!(
                        resource = slot.id.as_str(),
                        mode = ?slot.mode,
                        capacity = capacity.capacity,
                        "lease expired without renewal"
                    );
                    publish(slot, capacity);
                }
            }
        }
    }
    earliest
}

/// Publishes `capacity` on the slot's channel, after its hook.
fn publish(slot: &Slot, capacity: Capacity) {
    if let Some(hook) = &slot.hook {
        hook(capacity.capacity);
    }
    slot.tx.send_replace(capacity);
}

#[cfg(test)]
mod tests;
