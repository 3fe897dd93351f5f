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
//! A round is one GetCapacity carrying every resource, made through the
//! client's [`MasterSession`]: to the known master, else to the master that
//! Discovery at the current server address names, following `mastership`
//! redirects up to `max_redirects` times; a failed RPC (error or deadline)
//! forgets the master and moves to the next address, so an outage of one
//! server costs one round.
//! After a failed round the next waits for the backoff; after a success, for
//! the smallest refresh interval among the leases.
//!
//! A round asks for every resource, in as many GetCapacity requests as the
//! client's limits need ([`split`]): at most `max_resources_per_request`
//! resources and `max_request_bytes` encoded bytes each, sent one after
//! the other, each answer applied as it comes. A failed request ends the
//! round (the resources already answered keep their new leases).
//!
//! A permanent failure ([`SessionError::is_permanent`]) is tried at once
//! at the next configured address rather than after a backoff; once as
//! many permanent failures in a row as there are configured addresses
//! have come, the client stops: it records the failure for
//! [`Client::error`](super::Client::error), wakes every resource's
//! watchers, and makes no more rounds (releases and expiry go on).
//!
//! Every round's outcome is published on the client's last-error channel
//! ([`Client::watch_last_error`](super::Client::watch_last_error)). A
//! stop is recorded first, then published, and resources' watchers are
//! woken last, so that whoever the stopping round wakes finds both; a
//! server's answer clears the last error before the capacity it brings is
//! published, so that a receiver of that capacity finds no failure left.
//!
//! Lease expiry times are Unix seconds from the server, compared with the
//! client's [`WallClock`](crate::WallClock); the wait until an
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
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::backoff::Retry;
use super::lease::{self, fallback, Capacity, CapacitySource};
use super::{PendingRelease, ReleaseError, Shared, Slot};
use crate::lease::Lease;
use crate::lease::Timestamp;
use crate::pb;
use crate::session::{MasterSession, SessionError};
use tollgate_service::LockUnpoisoned;

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
            (Some(l), _) => (l.capacity, CapacitySource::Lease),
            (None, Some(_)) => (
                fallback(slot.mode, self.wants, self.safe_capacity),
                CapacitySource::Expired,
            ),
            (None, None) => (
                fallback(slot.mode, self.wants, self.safe_capacity),
                CapacitySource::Pending,
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

struct Task {
    shared: Arc<Shared>,
    session: MasterSession,
    retry: Retry,
    origin: Instant,
    /// Permanent failures in a row.
    permanent: usize,
}

/// How long a panicked loop waits before it starts again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// About thirty years: what "never" means for a deadline (tokio's own
/// choice for a far-future instant).
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

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
        session: MasterSession::new(
            config.servers.clone(),
            config.transport.clone(),
            config.rpc_timeout,
        )
        .max_redirects(config.max_redirects),
        retry: Retry::new(config.backoff, config.seed),
        origin: Instant::now(),
        permanent: 0,
        shared: shared.clone(),
    };
    task.run().await;
}

impl Task {
    async fn run(&mut self) {
        let mut next_refresh = Instant::now();
        loop {
            let (slots, releases, urgent, closing, stopped) = {
                let mut state = self.shared.state.lock_unpoisoned();
                let urgent = std::mem::take(&mut state.urgent);
                (
                    state.slots.values().cloned().collect::<Vec<_>>(),
                    std::mem::take(&mut state.releases),
                    urgent,
                    state.closing,
                    state.stopped.is_some(),
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
            if stopped {
                next_refresh = after(FAR_FUTURE);
            }
            if !stopped && !slots.is_empty() && Instant::now() >= next_refresh {
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
                        self.permanent = 0;
                        self.publish(None);
                        after(interval)
                    }
                    Err(e) if e.is_permanent() => {
                        self.permanent += 1;
                        let servers = self.shared.config.servers.len();
                        if self.permanent >= servers {
                            self.stop(e);
                            after(FAR_FUTURE)
                        } else {
                            warn!(
                                client = self.shared.id.as_str(),
                                error = %e,
                                "capacity refresh failed for good at this server; trying the next"
                            );
                            self.publish(Some(e));
                            Instant::now()
                        }
                    }
                    Err(e) => {
                        self.permanent = 0;
                        let delay = self.retry.next_delay();
                        warn!(
                            client = self.shared.id.as_str(),
                            error = %e,
                            failures = self.retry.failures(),
                            retry_in = ?delay,
                            "capacity refresh failed"
                        );
                        self.publish(Some(e));
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

    /// Records `error` as what stopped the client, then publishes it as
    /// the last error, then wakes every resource's watchers (their
    /// capacity unchanged), those added since the round began included:
    /// whoever is woken finds both set.
    fn stop(&self, error: SessionError) {
        error!(
            client = self.shared.id.as_str(),
            error = %error,
            "capacity refresh failed for good: the client stops asking"
        );
        let slots: Vec<Arc<Slot>> = {
            let mut state = self.shared.state.lock_unpoisoned();
            state.stopped = Some(error.clone());
            state.slots.values().cloned().collect()
        };
        self.publish(Some(error));
        for slot in slots {
            slot.tx.send_modify(|_| {});
        }
    }

    /// Publishes a round's outcome as [`Client::last_error`](super::Client::last_error):
    /// a failure always notifies, even when it repeats; a success only
    /// when it clears a failure.
    fn publish(&self, failed: Option<SessionError>) {
        match failed {
            Some(e) => {
                self.shared.last_error.send_replace(Some(e));
            }
            None => {
                self.shared
                    .last_error
                    .send_if_modified(|e| e.take().is_some());
            }
        }
    }

    /// One refresh round, in as many requests as the limits need;
    /// returns the interval until the next.
    async fn round(&mut self, slots: &[Arc<Slot>]) -> Result<Duration, SessionError> {
        let now = self.shared.config.clock.now();
        let since = self.origin.elapsed();
        let mut resources = Vec::with_capacity(slots.len());
        for slot in slots {
            let wants = slot.wants(since);
            let mut held = slot.held.lock_unpoisoned();
            held.wants = wants;
            resources.push(pb::ResourceRequest {
                resource_id: slot.id.clone(),
                priority: slot.priority,
                has: held.valid(now).map(Lease::to_pb),
                wants,
            });
        }
        let config = &self.shared.config;
        let base = pb::GetCapacityRequest {
            client_id: self.shared.id.clone(),
            resource: Vec::new(),
        };
        let sizes = resources.iter().map(prost::Message::encoded_len);
        let parts = split(
            prost::Message::encoded_len(&base),
            sizes,
            config.max_resources_per_request,
            config.max_request_bytes,
        );
        let mut interval: Option<Duration> = None;
        for part in parts {
            let message = pb::GetCapacityRequest {
                resource: resources[part.clone()].to_vec(),
                ..base.clone()
            };
            let response = self
                .session
                .call(|t, address| t.get_capacity(address, message.clone()))
                .await?;
            // A server answered: an earlier failure is over before the
            // capacity the answer brings is published.
            self.publish(None);
            let due = self.apply(&slots[part], &response.response);
            interval = Some(interval.map_or(due, |i| i.min(due)));
        }
        Ok(interval.unwrap_or(config.idle_refresh))
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
                    let mut held = slot.held.lock_unpoisoned();
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
            if let Some(l) = slot.held.lock_unpoisoned().lease {
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
    async fn release(&mut self, releases: Vec<PendingRelease>) {
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

    /// Releases `ids`, in as many requests as the limits need; the first
    /// failure ends it.
    async fn release_ids(&mut self, ids: Vec<String>) -> Result<(), ReleaseError> {
        let config = &self.shared.config;
        let base = pb::ReleaseCapacityRequest {
            client_id: self.shared.id.clone(),
            resource_id: Vec::new(),
        };
        // Each id is a length-delimited string, as a message's size counts.
        let sizes = ids.iter().map(String::len);
        let parts = split(
            prost::Message::encoded_len(&base),
            sizes,
            config.max_resources_per_request,
            config.max_request_bytes,
        );
        for part in parts {
            let request = pb::ReleaseCapacityRequest {
                resource_id: ids[part].to_vec(),
                ..base.clone()
            };
            // A redirect needs no retry: the new master holds no lease of
            // ours.
            self.session
                .send(|t, address| t.release_capacity(address, request.clone()))
                .await
                .map_err(ReleaseError::Unreachable)?;
        }
        Ok(())
    }
}

/// The ranges of consecutive entries that make requests of at most
/// `max_count` entries and `max_bytes` bytes, for a message of `base`
/// bytes without entries and entries whose own encoded lengths are
/// `sizes`. Each entry is a length-delimited field numbered below 16, so
/// it adds one byte of key, its length's varint and itself. An entry too
/// large to share a request goes alone; no range is empty.
pub(crate) fn split(
    base: usize,
    sizes: impl Iterator<Item = usize>,
    max_count: usize,
    max_bytes: usize,
) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let (mut start, mut bytes) = (0, base);
    let mut end = 0;
    for size in sizes {
        let field = 1 + prost::length_delimiter_len(size) + size;
        let count = end - start;
        if count > 0 && (count >= max_count || bytes + field > max_bytes) {
            parts.push(start..end);
            (start, bytes) = (end, base);
        }
        bytes += field;
        end += 1;
    }
    if end > start {
        parts.push(start..end);
    }
    parts
}

/// Publishes the capacity of every slot whose lease has expired and
/// returns the earliest future expiry as a tokio deadline.
fn expire(shared: &Shared, slots: &[Arc<Slot>]) -> Option<Instant> {
    let now = shared.config.clock.now();
    let mut earliest: Option<Instant> = None;
    for slot in slots {
        let held = slot.held.lock_unpoisoned();
        match held.lease {
            Some(l) if l.expiry > now => {
                let at = after(l.expiry - now);
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
            _ => {
                let capacity = held.capacity(slot, now);
                if slot.tx.borrow().source == CapacitySource::Lease {
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
