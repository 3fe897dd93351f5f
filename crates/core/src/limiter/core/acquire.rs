//! The slow acquire paths: what a caller does when its fast path comes up
//! short, from a second look at the pool to waiting in the queue.
//!
//! # Implementation notes
//!
//! A caller first completes from the pool (`gather`), doing a late fill
//! itself when the last one is overdue, and only then queues a node
//! (wait.rs). A queued thread parks until granted; the head of the queue
//! parks only until the next fill is due and then fills by itself, so a
//! descheduled filler thread never turns elapsed time into backlog while
//! callers sleep. A queued task is polled again only when woken by its
//! grant.

use std::time::Duration;

use super::Core;
use crate::limiter::recipient;
use crate::limiter::units::mul_div;
use crate::limiter::wait::{Cancel, Waiter};
use crate::sync::{current, lock, park, park_timeout, Ordering::Relaxed};

/// A head waiter whose fill is due within this many nanoseconds spins
/// instead of parking: a park and unpark cost more than the wait.
const SPIN_NS: u64 = 5_000;
/// The shortest sleep of a head waiter that found the fill due but could
/// not do it (another thread holds the fill lock and will serve the queue).
const MIN_PARK_NS: u64 = 20_000;

/// A caller's own reason to stop waiting: `stop` is asked at least every
/// `every` of real time while the caller is queued.
pub(crate) struct Check<'a> {
    pub(crate) every: Duration,
    pub(crate) stop: &'a mut dyn FnMut() -> bool,
}

/// How the caller of a slow path waits.
#[derive(Debug, Clone, Copy)]
enum Partial {
    /// All-or-nothing.
    No,
    /// Gather tokens as they come.
    Yes,
}

impl Core {
    /// Whether a request of `need` tokens gathers them as they come.
    fn partial_for(&self, need: u64) -> Partial {
        // Relaxed: a size written under the fill lock.
        if need > self.published.all_or_nothing.load(Relaxed) {
            Partial::Yes
        } else {
            Partial::No
        }
    }

    /// One attempt to complete a request of `need` tokens of which `held`
    /// are already gathered. `true` when the request is complete.
    fn try_complete(&self, need: u64, held: &mut u64, partial: Partial) -> bool {
        match partial {
            Partial::No => {
                if self.available() < need {
                    return false;
                }
                let got = self.gather(need);
                if got == need {
                    return true;
                }
                self.put_back(got);
                false
            }
            Partial::Yes => {
                let got = self.gather(need - *held);
                *held += got;
                if *held == need {
                    // Relaxed: a ledger count; see `ledger`.
                    self.in_flight.fetch_sub(need - got, Relaxed);
                    *held = 0;
                    return true;
                }
                self.in_flight.fetch_add(got, Relaxed);
                false
            }
        }
    }

    /// Gives back what an abandoned request gathered.
    fn abandon(&self, held: u64) {
        if held > 0 {
            // Relaxed: a ledger count; see `ledger`.
            self.in_flight.fetch_sub(held, Relaxed);
            self.put_back(held);
        }
    }

    /// The pool, then a late fill, before a caller queues: `true` when the
    /// request completed.
    fn complete_before_queueing(&self, need: u64, held: &mut u64, partial: Partial) -> bool {
        loop {
            if self.try_complete(need, held, partial) {
                return true;
            }
            if !self.fill_if_late() {
                return false;
            }
        }
    }

    /// Blocks until `need` tokens are taken; returns the tokens handed
    /// beyond the need, for the caller's thread budget.
    pub(crate) fn acquire_blocking(&self, need: u64) -> u64 {
        match self.wait(need, None, None) {
            Some(extra) => extra,
            None => panic!("limiter: an acquire without a deadline timed out"),
        }
    }

    /// Takes `need` tokens if they are there now (all-or-nothing).
    pub(crate) fn try_acquire_slow(&self, need: u64) -> bool {
        let mut held = 0;
        if self.try_complete(need, &mut held, Partial::No) {
            return true;
        }
        self.fill_if_late() && self.try_complete(need, &mut held, Partial::No)
    }

    /// Blocks until `need` tokens are taken (`Some(extra)`, with the tokens
    /// handed beyond the need) or the clock reaches `deadline_ns` (`None`;
    /// nothing is taken).
    pub(crate) fn acquire_until(&self, need: u64, deadline_ns: u64) -> Option<u64> {
        self.wait(need, Some(deadline_ns), None)
    }

    /// Blocks until `need` tokens are taken (`Some(extra)`) or `check`'s
    /// `stop` answers `true` (`None`; nothing is taken).
    pub(crate) fn acquire_checked(&self, need: u64, check: Check<'_>) -> Option<u64> {
        self.wait(need, None, Some(check))
    }

    /// The blocking wait: queue a node for this thread and park until it is
    /// granted. The queue's head parks only until the next fill is due (a
    /// quarter interval of grace for the filler thread) and then fills by
    /// itself. With a `check`, every sleep is at most `check.every` long and
    /// `check.stop` is asked once that much real time has passed since it
    /// was last asked; `true` leaves the queue as a deadline does.
    fn wait(&self, need: u64, deadline: Option<u64>, mut check: Option<Check<'_>>) -> Option<u64> {
        let partial = self.partial_for(need);
        let mut held = 0;
        if self.complete_before_queueing(need, &mut held, partial) {
            return Some(0);
        }
        if let Some(deadline) = deadline {
            let now = self.clock.now_ns();
            if now >= deadline || !self.could_gather_within(need - held, deadline - now) {
                self.abandon(held);
                return None;
            }
        }
        let node = std::sync::Arc::new(Waiter::thread(
            need,
            matches!(partial, Partial::Yes),
            held,
            current(),
        ));
        self.waiters.enqueue(&node, self, self.handoff_tokens());
        self.filler.kick();
        // When `check.stop` was last asked (real time; only with a check).
        let mut asked = check.as_ref().map(|_| std::time::Instant::now());
        loop {
            if let Some(extra) = node.granted() {
                return Some(extra);
            }
            let now = self.clock.now_ns();
            let mut sleep = None;
            let mut leave = deadline.is_some_and(|deadline| now >= deadline);
            if let Some(deadline) = deadline {
                sleep = Some(deadline.saturating_sub(now));
            }
            if let (Some(check), Some(asked)) = (check.as_mut(), asked.as_mut()) {
                let every = u64::try_from(check.every.as_nanos()).unwrap_or(u64::MAX);
                let mut since = u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX);
                if since >= every {
                    leave |= (check.stop)();
                    *asked = std::time::Instant::now();
                    since = 0;
                }
                let left = (every - since).max(1);
                sleep = Some(sleep.map_or(left, |s: u64| s.min(left)));
            }
            if leave {
                return match self.waiters.cancel(&node, self, self.handoff_tokens()) {
                    Cancel::Granted(extra) => Some(extra),
                    Cancel::Left => None,
                };
            }
            if node.is_head() {
                let due = self.head_fill_due(need, partial);
                let until = if now >= due {
                    if self.fill_if_late() {
                        continue;
                    }
                    MIN_PARK_NS
                } else {
                    due - now
                };
                if until <= SPIN_NS {
                    std::hint::spin_loop();
                    continue;
                }
                sleep = Some(sleep.map_or(until, |s: u64| s.min(until)));
            }
            match sleep {
                Some(ns) => park_timeout(Duration::from_nanos(ns)),
                None => park(),
            }
        }
    }

    /// When the head waiter fills by itself: when the next fill is due,
    /// or at a low rate when the fill can first bring what it needs (see
    /// `until_op`). While a thread heads the queue, the filler thread
    /// stands back (see `until_next_fill`), so the head's wake-up is the
    /// fill, and a head served by its own fill needs no other wake.
    fn head_fill_due(&self, need: u64, partial: Partial) -> u64 {
        // Relaxed: a hint; the fill reads its time under the lock.
        let last = self.published.last_fill_ns.load(Relaxed);
        let wait = match partial {
            // It gathers tokens as they come: every fill serves it.
            Partial::Yes => self.fill_interval_ns,
            Partial::No => self.fill_interval_ns.max(self.until_op(need)),
        };
        last.saturating_add(wait)
    }

    /// Whether `missing` tokens could arrive within `ns`: what the active
    /// pool holds plus the most the schedule can deliver in that time (at
    /// the burst rate), with one fill interval of slack.
    fn could_gather_within(&self, missing: u64, ns: u64) -> bool {
        let st = lock(&self.schedule);
        if !st.started {
            return true;
        }
        let span = ns.saturating_add(self.fill_interval_ns);
        let at_rate = st.meter.tokens_floor(span);
        let at_burst = mul_div(at_rate, u128::from(st.spec.burst_ppm()), 1_000_000);
        u128::from(missing) <= u128::from(self.available()) + at_burst
    }

    /// One poll of an async acquire; see [`AcquireFuture`](crate::AcquireFuture).
    /// `Some(extra)` when complete, with the tokens handed beyond the need.
    pub(crate) fn poll_acquire(
        &self,
        need: u64,
        held: &mut u64,
        node: &mut Option<std::sync::Arc<Waiter>>,
        waker: &std::task::Waker,
    ) -> Option<u64> {
        if let Some(queued) = node {
            if let Some(extra) = queued.granted() {
                *node = None;
                return Some(extra);
            }
            // Woken without a grant (a served task left the pool tokens
            // and woke the front, `leave_handoff`), or polled for a reason
            // of its own: serve the queue from what the pool holds, in
            // queue order. Its own waker is still taken, so the grant
            // wakes no one else for it.
            if queued.could_take(self.available()) {
                self.waiters.serve_for(queued, self, self.handoff_tokens());
                if let Some(extra) = queued.granted() {
                    *node = None;
                    return Some(extra);
                }
            }
            queued.set_waker(waker);
            // Re-check: a grant made before the new waker was stored woke
            // the old one.
            let extra = queued.granted()?;
            *node = None;
            return Some(extra);
        }
        let partial = self.partial_for(need);
        if self.complete_before_queueing(need, held, partial) {
            return Some(0);
        }
        let queued = std::sync::Arc::new(Waiter::task(
            need,
            matches!(partial, Partial::Yes),
            *held,
            waker.clone(),
        ));
        *held = 0;
        self.waiters.enqueue(&queued, self, self.handoff_tokens());
        if let Some(extra) = queued.granted() {
            return Some(extra);
        }
        self.filler.kick();
        *node = Some(queued);
        None
    }

    /// Cleans up after an async acquire dropped before completing: gives
    /// back what it gathered, or what it was handed if a grant raced the drop.
    pub(crate) fn cancel_acquire(&self, held: u64, node: Option<std::sync::Arc<Waiter>>) {
        if let Some(node) = node {
            if let Cancel::Granted(extra) = self.waiters.cancel(&node, self, self.handoff_tokens())
            {
                self.put_back(node.need() + extra);
            }
        }
        self.abandon(held);
    }

    /// Takes back tokens handed to a waiter that had no budget to keep them in.
    pub(crate) fn return_extra(&self, extra: u64) {
        self.put_back(extra);
    }

    /// Where a served task leaves the tokens it was handed beyond its need:
    /// in the pool, in the home slice of the thread that polled it, where
    /// that thread's next acquire finds them first. The thread notes the
    /// task (`recipient::note`), and unless the task is `looping`
    /// (it queued after spending the last hand-off this thread left for
    /// it), wakes the front of the queue to take what that acquire leaves.
    ///
    /// A task that acquires in a loop goes on in the same poll: its next
    /// acquires take the hand-off from the slice, one compare-exchange
    /// each, and once it has spent it, it queues again as `looping`, so its
    /// later grants wake it alone: one wake-up admits the whole hand-off.
    /// The first grant of any task also wakes the front task, which after
    /// a looping task finds nothing and waits on; after a task that took
    /// one op and ended it takes the rest (and leaves what it does not
    /// need, in turn): no token waits in a place that no queued waiter
    /// looks. A looping task that stops leaves the rest in its slice, part
    /// of the pool that every fill serves the queue from: its queued
    /// waiters get it at the next fill.
    pub(crate) fn leave_handoff(&self, extra: u64, looping: bool, waker: &std::task::Waker) {
        if extra == 0 {
            return;
        }
        self.slices.put_home(extra);
        recipient::note(self.id(), waker);
        if !looping {
            self.waiters.nudge(self, self.handoff_tokens());
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::task::Waker;
    use std::time::Duration;

    use super::Core;
    use crate::clock::ManualClock;
    use crate::limiter::units::TOKENS_PER_OP;

    const INTERVAL: Duration = Duration::from_micros(500);

    /// With only tasks waiting, the filler spaces its fills by two thirds
    /// of the 1 ms pool at 100K ops/s: each fill brings 66.67 ops, and
    /// the first task takes all its whole ops (its op and 65 more as a
    /// hand-off), so one fill wakes one task, not two. The two thirds of
    /// an op left stay in the pool: a fraction handed to a budget could
    /// start no op there.
    #[test]
    fn one_fill_at_the_filler_spacing_serves_one_task() {
        let clock = ManualClock::new();
        let spec = "100K".parse().expect("a valid spec");
        let core = Core::new(spec, Box::new(clock.clone()), 4, INTERVAL, None);
        // Empty the start allowance.
        while core.try_acquire_slow(TOKENS_PER_OP) {}
        let waker = Waker::noop();
        let (mut first, mut second) = (None, None);
        let (mut held_first, mut held_second) = (0, 0);
        assert_eq!(
            core.poll_acquire(TOKENS_PER_OP, &mut held_first, &mut first, waker),
            None
        );
        assert_eq!(
            core.poll_acquire(TOKENS_PER_OP, &mut held_second, &mut second, waker),
            None
        );
        let spacing = core.until_next_fill(INTERVAL);
        assert_eq!(spacing, Duration::from_nanos(666_666));
        let filled = core.ledger().filled;
        clock.advance(spacing);
        core.fill_and_wake();
        let added = core.ledger().filled - filled;
        // 666,666 ns at 100K ops/s: 66.6666 ops, in tokens of 2^-20 op.
        assert_eq!(added, 69_904_996);
        assert_eq!(added / u128::from(TOKENS_PER_OP), 66);
        let extra = core.poll_acquire(TOKENS_PER_OP, &mut held_first, &mut first, waker);
        assert_eq!(
            extra,
            Some(65 * TOKENS_PER_OP),
            "the first task takes the fill's whole ops"
        );
        assert_eq!(core.available(), 69_904_996 - 66 * TOKENS_PER_OP);
        assert_eq!(
            core.poll_acquire(TOKENS_PER_OP, &mut held_second, &mut second, waker),
            None,
            "the second task is not woken for nothing"
        );
        // The next fill is the second task's.
        clock.advance(spacing);
        core.fill_and_wake();
        assert!(core
            .poll_acquire(TOKENS_PER_OP, &mut held_second, &mut second, waker)
            .is_some());
    }
}
