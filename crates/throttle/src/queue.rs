//! The admission queue: a cost-bounded FIFO drained at a fixed cost rate,
//! where a CRITICAL request may evict queued NOT_CRITICAL ones.
//!
//! # Implementation notes
//!
//! The queue is a leaky bucket in cost: it releases requests at
//! `rate` units of cost per second, in arrival order. `next` is the time
//! (in the core's exact tokens, as in GCRA) at which the head may leave;
//! each departure moves it on by the departing request's cost. A request
//! costing more than the capacity is refused whatever the queue holds:
//! passing at once, it would push `next` past what the queue could ever
//! drain for those behind it. Any other request arriving to an empty queue
//! at or after `next` passes at once. Otherwise it waits in the queue if
//! the queued cost plus its own fits the capacity.
//!
//! Each queued request holds a ticket; a caller that gives up (its future
//! dropped) hands the ticket back and leaves at once, freeing its cost.
//!
//! When it does not fit, a NOT_CRITICAL request is rejected at once. A
//! CRITICAL one evicts queued NOT_CRITICAL requests, most recent first,
//! until it fits; the evicted are handed back to be rejected at once. If
//! even evicting every NOT_CRITICAL request would not make room, nothing
//! is evicted and the CRITICAL request is rejected.
//!
//! Post-accounting moves `next` by the difference between a request's
//! measured and charged cost, at most the capacity: later when it cost
//! more (those queued behind it wait that much longer, but no longer than
//! a full queue would make them), earlier when it cost less, but never
//! before the present, so a refund cannot release a burst.
//!
//! [`AdmissionQueue`] is pure: the caller passes the time and wakes the
//! released requests. [`Admission`] is that caller, as the throttler uses
//! it: the queue behind a lock, each request waiting on a channel, and a
//! driver task, spawned when the first request queues, that sleeps until
//! [`AdmissionQueue::next_release_ns`], wakes what is due and ends when
//! the queue is empty. A driver that wakes late releases every overdue
//! request at once. A waiting request whose future is dropped leaves the
//! queue at once, without using its rate.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tollgate::pool::{Meter, TOKENS_PER_OP};
use tollgate::{Clock, RateSpec};
use tollgate_service::LockUnpoisoned;

use super::metrics::ThrottleMetrics;
use super::outcome::RejectionKind;

/// How important a request is to serve when the server is overloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Criticality {
    /// Must be served if at all possible: may evict NOT_CRITICAL requests
    /// from a full queue.
    Critical,
    /// May be shed first.
    #[default]
    NotCritical,
}

impl Criticality {
    /// Parses `CRITICAL` or `NOT_CRITICAL` (any case, `-` or `_`).
    pub fn parse(s: &str) -> Option<Criticality> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("critical") {
            Some(Criticality::Critical)
        } else if s.eq_ignore_ascii_case("not_critical") || s.eq_ignore_ascii_case("not-critical") {
            Some(Criticality::NotCritical)
        } else {
            None
        }
    }
}

/// What happened to an offered request.
#[derive(Debug)]
pub(crate) enum Offer<T> {
    /// Passes now.
    Now(T),
    /// Waits in the queue under `ticket` (see [`AdmissionQueue::leave`]);
    /// `evicted` were removed to make room and must be rejected.
    Queued { ticket: u64, evicted: Vec<T> },
    /// Rejected: the queue is full.
    Full(T),
    /// Rejected: the cost exceeds the queue's capacity, so it never fits.
    TooCostly(T),
}

#[derive(Debug)]
struct Queued<T> {
    ticket: u64,
    item: T,
    cost: u64,
    criticality: Criticality,
}

/// A cost-bounded FIFO drained at a fixed cost rate.
#[derive(Debug)]
pub(crate) struct AdmissionQueue<T> {
    items: VecDeque<Queued<T>>,
    queued_cost: u64,
    capacity: u64,
    meter: Meter,
    /// When the head may leave, in tokens since the clock's origin.
    next: u128,
    /// The ticket of the next request queued.
    next_ticket: u64,
}

impl<T> AdmissionQueue<T> {
    /// A queue holding up to `capacity` units of cost, drained at the rate
    /// of `nano_units_per_sec` (units per second times 1e9).
    pub(crate) fn new(capacity: u64, nano_units_per_sec: u128) -> AdmissionQueue<T> {
        AdmissionQueue {
            items: VecDeque::new(),
            queued_cost: 0,
            capacity,
            meter: Meter::new(nano_units_per_sec),
            next: 0,
            next_ticket: 0,
        }
    }

    fn tokens(cost: u64) -> u128 {
        u128::from(cost) * u128::from(TOKENS_PER_OP)
    }

    /// Offers a request of `cost` at `now_ns`.
    pub(crate) fn offer(
        &mut self,
        item: T,
        cost: u64,
        criticality: Criticality,
        now_ns: u64,
    ) -> Offer<T> {
        if cost > self.capacity {
            return Offer::TooCostly(item);
        }
        let t = self.meter.tokens_floor(now_ns);
        if self.items.is_empty() && self.next <= t {
            self.next = t + Self::tokens(cost);
            return Offer::Now(item);
        }
        let mut evicted = Vec::new();
        let over = (self.queued_cost + cost).saturating_sub(self.capacity);
        if over > 0 {
            if criticality == Criticality::NotCritical {
                return Offer::Full(item);
            }
            // Most recent NOT_CRITICAL first, until the excess is covered.
            let mut chosen = Vec::new();
            let mut freed = 0;
            for (i, q) in self.items.iter().enumerate().rev() {
                if freed >= over {
                    break;
                }
                if q.criticality == Criticality::NotCritical {
                    chosen.push(i);
                    freed += q.cost;
                }
            }
            if freed < over {
                return Offer::Full(item);
            }
            // `chosen` is in descending index order: removals keep the
            // remaining indices valid.
            for i in chosen {
                if let Some(q) = self.items.remove(i) {
                    self.queued_cost -= q.cost;
                    evicted.push(q.item);
                }
            }
        }
        self.queued_cost += cost;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.items.push_back(Queued {
            ticket,
            item,
            cost,
            criticality,
        });
        Offer::Queued { ticket, evicted }
    }

    /// Removes the request queued under `ticket`, if it is still queued
    /// (not yet released or evicted), without using the rate.
    pub(crate) fn leave(&mut self, ticket: u64) -> Option<T> {
        // Tickets rise along the queue: a binary search finds it.
        let i = self
            .items
            .binary_search_by_key(&ticket, |q| q.ticket)
            .ok()?;
        let q = self.items.remove(i)?;
        self.queued_cost -= q.cost;
        Some(q.item)
    }

    /// Releases the requests whose turn has come by `now_ns`, in order.
    /// Requests for which `live` is false (their caller has gone) leave
    /// without using the rate.
    pub(crate) fn release(&mut self, now_ns: u64, mut live: impl FnMut(&T) -> bool) -> Vec<T> {
        let t = self.meter.tokens_floor(now_ns);
        let mut out = Vec::new();
        while let Some(head) = self.items.front() {
            let alive = live(&head.item);
            if alive && self.next > t {
                break;
            }
            let Some(q) = self.items.pop_front() else {
                break;
            };
            self.queued_cost -= q.cost;
            if alive {
                self.next += Self::tokens(q.cost);
            }
            out.push(q.item);
        }
        out
    }

    /// Post-accounting at `now_ns` for a request that went through the
    /// queue: `delta` units of cost more than it was charged (a refund if
    /// negative) move the schedule later (earlier, but not before now).
    pub(crate) fn settle(&mut self, now_ns: u64, delta: i64) {
        let t = self.meter.tokens_floor(now_ns);
        let d = Self::tokens(delta.unsigned_abs().min(self.capacity));
        self.next = if delta >= 0 {
            self.next.max(t) + d
        } else {
            self.next.saturating_sub(d).max(t)
        };
    }

    /// When the head may leave (nanoseconds, rounded up), if anything waits.
    pub(crate) fn next_release_ns(&self) -> Option<u64> {
        if self.items.is_empty() {
            return None;
        }
        Some(self.free_at_ns())
    }

    /// When the next request may leave (nanoseconds, rounded up): the
    /// head's turn, or, with nothing queued, when one arriving would pass
    /// at once.
    pub(crate) fn free_at_ns(&self) -> u64 {
        let ns = self.meter.nanos_for(self.next);
        if self.meter.tokens_floor(ns) >= self.next {
            ns
        } else {
            ns.saturating_add(1)
        }
    }

    /// The cost waiting in the queue.
    pub(crate) fn queued_cost(&self) -> u64 {
        self.queued_cost
    }

    /// The number of requests waiting.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// A queued request's channel: told `Ok` when released, or why it was
/// refused after queueing.
type Waiter = oneshot::Sender<Result<(), RejectionKind>>;

/// The throttler's admission queue: an [`AdmissionQueue`] of waiting
/// requests, with the driver that releases them on time.
#[derive(Debug)]
pub(crate) struct Admission {
    state: Mutex<QueueState>,
    /// The queue's capacity, read without its lock.
    capacity: u64,
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
struct QueueState {
    core: AdmissionQueue<Waiter>,
    /// A driver task is running.
    driving: bool,
}

impl Admission {
    /// A queue holding up to `capacity` units of cost, released at `rate`
    /// units per second (its burst ratio is unused), timed by `clock`.
    pub(crate) fn new(capacity: u64, rate: RateSpec, clock: Arc<dyn Clock>) -> Admission {
        Admission {
            state: Mutex::new(QueueState {
                core: AdmissionQueue::new(capacity, rate.nano_ops_per_sec()),
                driving: false,
            }),
            capacity,
            clock,
        }
    }

    /// The most cost the queue ever admits.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Passes a request of `cost` through the queue: at once when it is
    /// idle, otherwise when the driver releases it. Needs a tokio runtime
    /// (the driver is a task).
    ///
    /// # Errors
    ///
    /// Why it was refused: [`RejectionKind::QueueFull`],
    /// [`RejectionKind::Evicted`], or [`RejectionKind::CostTooHigh`] for a
    /// cost above the capacity.
    ///
    /// # Cancel safety
    ///
    /// A request whose future is dropped while it waits leaves the queue
    /// at once, without using its rate.
    pub(crate) async fn pass(
        self: &Arc<Self>,
        cost: u64,
        criticality: Criticality,
        metrics: &ThrottleMetrics,
    ) -> Result<(), RejectionKind> {
        let (tx, rx) = oneshot::channel();
        let offer = {
            let mut q = self.state.lock_unpoisoned();
            let offer = q.core.offer(tx, cost, criticality, self.clock.now_ns());
            if matches!(offer, Offer::Queued { .. }) && !q.driving {
                q.driving = true;
                tokio::spawn(drive(self.clone()));
            }
            offer
        };
        match offer {
            Offer::Now(_) => {
                metrics.queue("immediate");
                Ok(())
            }
            Offer::Full(_) => {
                metrics.queue("full");
                Err(RejectionKind::QueueFull)
            }
            Offer::TooCostly(_) => {
                metrics.queue("too_costly");
                Err(RejectionKind::CostTooHigh)
            }
            Offer::Queued { ticket, evicted } => {
                metrics.queue("queued");
                for waiter in evicted {
                    metrics.queue("evicted");
                    let _ = waiter.send(Err(RejectionKind::Evicted));
                }
                // Leaves the queue if this future is dropped while waiting.
                let place = Place {
                    queue: &self.state,
                    ticket,
                };
                let result = rx.await.unwrap_or(Err(RejectionKind::QueueFull));
                std::mem::forget(place);
                result
            }
        }
    }

    /// Post-accounting for a request that passed: see
    /// [`AdmissionQueue::settle`].
    pub(crate) fn settle(&self, now_ns: u64, delta: i64) {
        self.state.lock_unpoisoned().core.settle(now_ns, delta);
    }

    /// When the next request may leave: see [`AdmissionQueue::free_at_ns`].
    pub(crate) fn free_at_ns(&self) -> u64 {
        self.state.lock_unpoisoned().core.free_at_ns()
    }

    /// The cost waiting and the number of requests waiting.
    pub(crate) fn waiting(&self) -> (u64, usize) {
        let q = self.state.lock_unpoisoned();
        (q.core.queued_cost(), q.core.len())
    }
}

/// A place in the admission queue, given up when dropped: a waiting
/// request whose future is dropped leaves the queue at once.
struct Place<'a> {
    queue: &'a Mutex<QueueState>,
    ticket: u64,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.queue.lock_unpoisoned().core.leave(self.ticket);
    }
}

/// Releases queued requests at the queue's rate until it is empty.
async fn drive(queue: Arc<Admission>) {
    loop {
        let wait = {
            let mut q = queue.state.lock_unpoisoned();
            let now = queue.clock.now_ns();
            for waiter in q.core.release(now, |w| !w.is_closed()) {
                let _ = waiter.send(Ok(()));
            }
            match q.core.next_release_ns() {
                None => {
                    q.driving = false;
                    return;
                }
                Some(at) => at.saturating_sub(now),
            }
        };
        tokio::time::sleep(Duration::from_nanos(wait.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Criticality::{Critical, NotCritical};

    const SEC: u64 = 1_000_000_000;

    fn queue(capacity: u64) -> AdmissionQueue<&'static str> {
        // One unit of cost per second.
        AdmissionQueue::new(capacity, 1_000_000_000)
    }

    #[test]
    fn a_critical_request_evicts_exactly_the_most_recent_not_critical_one() {
        let mut q = queue(3);
        assert!(matches!(
            q.offer("first", 1, NotCritical, 0),
            Offer::Now("first")
        ));
        for name in ["a", "b", "c"] {
            assert!(
                matches!(q.offer(name, 1, NotCritical, 0), Offer::Queued { ref evicted, .. } if evicted.is_empty())
            );
        }
        assert!(matches!(q.offer("d", 1, NotCritical, 0), Offer::Full("d")));
        match q.offer("urgent", 1, Critical, 0) {
            Offer::Queued { evicted, .. } => assert_eq!(evicted, vec!["c"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(q.len(), 3);
        // Departures one second apart, in order.
        assert_eq!(q.next_release_ns(), Some(SEC));
        assert!(q.release(SEC - 1, |_| true).is_empty());
        assert_eq!(q.release(SEC, |_| true), vec!["a"]);
        assert_eq!(q.release(3 * SEC, |_| true), vec!["b", "urgent"]);
        assert_eq!(q.next_release_ns(), None);
    }

    #[test]
    fn a_critical_request_evicts_nothing_when_eviction_cannot_make_room() {
        let mut q = queue(2);
        assert!(matches!(q.offer("first", 1, NotCritical, 0), Offer::Now(_)));
        assert!(matches!(
            q.offer("crit", 1, Critical, 0),
            Offer::Queued { .. }
        ));
        assert!(matches!(
            q.offer("not", 1, NotCritical, 0),
            Offer::Queued { .. }
        ));
        // Needs 2 units; only 1 is NOT_CRITICAL.
        assert!(matches!(q.offer("big", 2, Critical, 0), Offer::Full("big")));
        assert_eq!(q.len(), 2);
        assert_eq!(q.queued_cost(), 2);
    }

    #[test]
    fn post_accounting_moves_the_schedule_but_never_into_the_past() {
        let mut q = queue(5);
        assert!(matches!(q.offer("a", 1, NotCritical, 0), Offer::Now(_)));
        // "a" really cost 3: the next may pass at 3 s, not 1 s.
        q.settle(0, 2);
        assert!(matches!(
            q.offer("b", 1, NotCritical, 2 * SEC),
            Offer::Queued { .. }
        ));
        assert_eq!(q.next_release_ns(), Some(3 * SEC));
        assert_eq!(q.release(3 * SEC, |_| true), vec!["b"]);
        // "b" was charged 1 and cost nothing: a refund of 1 at 3 s would
        // move the schedule to 3 s, which is the present, not before it.
        q.settle(3 * SEC, -1);
        assert!(matches!(
            q.offer("c", 1, NotCritical, 3 * SEC),
            Offer::Now(_)
        ));
        // A refund larger than the schedule ahead stops at the present.
        q.settle(3 * SEC, -100);
        assert!(matches!(
            q.offer("d", 1, NotCritical, 3 * SEC),
            Offer::Now(_)
        ));
        assert!(matches!(
            q.offer("e", 1, NotCritical, 3 * SEC),
            Offer::Queued { .. }
        ));
        assert_eq!(q.next_release_ns(), Some(4 * SEC));
    }

    #[test]
    fn requests_whose_callers_left_do_not_use_the_rate() {
        let mut q = queue(5);
        assert!(matches!(q.offer("first", 1, NotCritical, 0), Offer::Now(_)));
        assert!(matches!(
            q.offer("gone", 1, NotCritical, 0),
            Offer::Queued { .. }
        ));
        assert!(matches!(
            q.offer("here", 1, NotCritical, 0),
            Offer::Queued { .. }
        ));
        assert_eq!(q.release(SEC, |i| *i != "gone"), vec!["gone", "here"]);
        // Only "here" used a slot: the next departure is at 2 s.
        assert!(matches!(
            q.offer("next", 1, NotCritical, SEC),
            Offer::Queued { .. }
        ));
        assert_eq!(q.next_release_ns(), Some(2 * SEC));
    }

    #[test]
    fn a_cost_above_the_capacity_is_refused_even_when_idle() {
        let mut q = queue(10);
        assert!(matches!(
            q.offer("huge", 11, NotCritical, 0),
            Offer::TooCostly("huge")
        ));
        assert!(matches!(
            q.offer("max", u64::MAX, Critical, 0),
            Offer::TooCostly("max")
        ));
        // Nothing was scheduled: the next request passes at once.
        assert!(matches!(q.offer("next", 10, NotCritical, 0), Offer::Now(_)));
        assert_eq!(q.free_at_ns(), 10 * SEC);
    }

    #[test]
    fn a_request_that_leaves_frees_its_place_at_once() {
        let mut q = queue(2);
        assert!(matches!(q.offer("first", 1, NotCritical, 0), Offer::Now(_)));
        let Offer::Queued { ticket: a, .. } = q.offer("a", 1, NotCritical, 0) else {
            panic!("a not queued");
        };
        let Offer::Queued { ticket: b, .. } = q.offer("b", 1, NotCritical, 0) else {
            panic!("b not queued");
        };
        assert!(matches!(q.offer("c", 1, NotCritical, 0), Offer::Full("c")));
        assert_eq!(q.leave(a), Some("a"));
        assert_eq!(q.leave(a), None);
        assert_eq!((q.len(), q.queued_cost()), (1, 1));
        assert!(matches!(
            q.offer("c", 1, NotCritical, 0),
            Offer::Queued { .. }
        ));
        assert_eq!(q.leave(b), Some("b"));
        // "c" is now the head, leaving at 1 s.
        assert_eq!(q.release(SEC, |_| true), vec!["c"]);
    }

    #[test]
    fn post_accounting_moves_the_schedule_by_at_most_the_capacity() {
        let mut q = queue(5);
        assert!(matches!(q.offer("a", 1, NotCritical, 0), Offer::Now(_)));
        q.settle(0, i64::MAX);
        assert_eq!(q.free_at_ns(), 6 * SEC);
    }
}
