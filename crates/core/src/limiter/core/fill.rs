//! Filling: adding measured time to the pools
//! (`docs/design/token-pool.md` §3), and the exact accounting built on it.

use std::time::Duration;

use super::{Core, Schedule};
use crate::limiter::pool::Pool;
use crate::limiter::stats::{Ledger, Stats};
use crate::limiter::units::{mul_div, TOKENS_PER_OP};
use crate::sync::{lock, try_lock, Ordering::Relaxed};

/// How long the filler thread stays punctual after a late fill.
const PUNCTUAL_NS: u64 = 200_000_000;

impl Core {
    /// Fills if the last fill is overdue (one interval) and no one else is
    /// filling. `true` if tokens were added.
    pub(crate) fn fill_if_late(&self) -> bool {
        let now = self.clock.now_ns();
        // Relaxed: a hint; the fill itself reads its time under the lock.
        let last = self.published.last_fill_ns.load(Relaxed);
        if now.saturating_sub(last) < self.fill_interval_ns {
            return false;
        }
        let Some(mut st) = try_lock(&self.schedule) else {
            return false;
        };
        let added = self.fill_locked(&mut st, now);
        drop(st);
        // Even when the fill added nothing, the pool may hold what a
        // looping task left without waking the queue (`leave_handoff`).
        self.serve();
        added > 0
    }

    /// Fills now (blocking on the fill lock) and wakes waiters.
    pub(crate) fn fill_and_wake(&self) {
        let now = self.clock.now_ns();
        let mut st = lock(&self.schedule);
        self.fill_locked(&mut st, now);
        drop(st);
        // Even when the fill added nothing: see `fill_if_late`.
        self.serve();
    }

    /// How long the filler thread sleeps before its next fill. While only
    /// the filler times the fills (tasks wait, or threads behind no timed
    /// head): the spacing of `publish_sizes`, two thirds of the time the
    /// active pool covers, between one and two intervals, so each wake-up of
    /// the filler (and of whoever it serves) admits as many ops as the
    /// pool allows without spilling a somewhat late fill into the backlog.
    /// While a parked thread heads the queue and fills on time by itself:
    /// four intervals (the filler is then only a backup), except that
    /// after a late fill the filler is punctual again for a while, one
    /// interval: two timers are likelier than one to run on time on a busy
    /// machine.
    pub(crate) fn until_next_fill(&self, interval: Duration) -> Duration {
        // Relaxed: hints.
        let last = self.published.last_fill_ns.load(Relaxed);
        let now = self.clock.now_ns();
        let since = now.saturating_sub(last);
        let wait = if !self.waiters.has_timed_head() {
            Duration::from_nanos(self.published.filler_spacing_ns.load(Relaxed))
        } else if now < self.published.punctual_until_ns.load(Relaxed) {
            interval
        } else {
            interval.saturating_mul(4)
        };
        let wait = wait.max(Duration::from_nanos(self.until_op(TOKENS_PER_OP)));
        wait.saturating_sub(Duration::from_nanos(since))
    }

    /// At a low rate, where one op spans more than two fill intervals: the
    /// schedule time after the last fill until the active pool can hold
    /// `need` tokens (at the burst rate while there is a backlog, the
    /// fastest a fill then adds them). No fill before then can serve a
    /// waiter for `need`, so waiters sleep that long instead of waking
    /// every interval: at 1 op/s, one wake-up per op rather than two
    /// thousand. 0 at higher rates.
    pub(super) fn until_op(&self, need: u64) -> u64 {
        // Relaxed: size hints and a gauge, written under the fill lock.
        let op_ns = if self.published.backlog_ns.load(Relaxed) == 0 {
            self.published.op_ns.load(Relaxed)
        } else {
            self.published.burst_op_ns.load(Relaxed)
        };
        if op_ns <= self.fill_interval_ns.saturating_mul(2) {
            return 0;
        }
        let missing = need.saturating_sub(self.available());
        let ns = mul_div(
            u128::from(missing),
            u128::from(op_ns),
            u128::from(TOKENS_PER_OP),
        );
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The fill (`docs/design/token-pool.md` §3) on a snapshot of the active pool. Returns the
    /// tokens added to the active pool.
    pub(super) fn fill_locked(&self, st: &mut Schedule, now: u64) -> u64 {
        if now <= st.last_fill_ns {
            return 0;
        }
        let elapsed = now - st.last_fill_ns;
        st.last_fill_ns = now;
        if elapsed > self.fill_interval_ns + self.fill_interval_ns / 2 && self.has_waiters() {
            // Relaxed: a hint for `until_next_fill`.
            self.published
                .punctual_until_ns
                .store(now.saturating_add(PUNCTUAL_NS), Relaxed);
        }
        // Relaxed: a hint for `fill_if_late`.
        self.published.last_fill_ns.store(now, Relaxed);
        if !st.started {
            return 0;
        }
        let tokens = st.meter.tokens_for(elapsed, &mut st.carry);
        st.filled += tokens;
        let mut pool = Pool {
            active: self.available(),
            waiting: st.waiting,
        };
        let added = pool.fill(tokens, &st.sizing);
        st.dropped += pool.cap_waiting(st.max_waiting);
        st.waiting = pool.waiting;
        if added > 0 {
            // Relaxed: published to waiters by the serve that follows.
            self.central.fetch_add(added, Relaxed);
        }
        // Integrate the wait of the ops admitted since the last fill at the
        // backlog they saw.
        let admitted = self.admitted_tokens(st, u128::from(pool.active));
        let delta = admitted.saturating_sub(st.admitted_seen);
        st.admitted_seen = st.admitted_seen.max(admitted);
        st.total_wait_ns += mul_div(delta, u128::from(st.backlog_ns), u128::from(TOKENS_PER_OP));
        st.backlog_ns = st.meter.nanos_for(st.waiting);
        // Relaxed: a gauge.
        self.published.backlog_ns.store(st.backlog_ns, Relaxed);
        added
    }

    fn admitted_tokens(&self, st: &Schedule, active: u128) -> u128 {
        // Relaxed: a ledger count, exact when no acquire runs concurrently.
        let in_flight = u128::from(self.in_flight.load(Relaxed));
        (st.filled - st.dropped).saturating_sub(st.waiting + active + in_flight)
    }

    pub(crate) fn stats(&self) -> Stats {
        let st = lock(&self.schedule);
        let admitted = self.admitted_tokens(&st, u128::from(self.available()));
        Stats {
            admitted: u64::try_from(admitted / u128::from(TOKENS_PER_OP)).unwrap_or(u64::MAX),
            total_wait: Duration::from_nanos(u64::try_from(st.total_wait_ns).unwrap_or(u64::MAX)),
            backlog: Duration::from_nanos(st.backlog_ns),
        }
    }

    pub(crate) fn ledger(&self) -> Ledger {
        let st = lock(&self.schedule);
        Ledger {
            filled: st.filled,
            dropped: st.dropped,
            active: u128::from(self.available()),
            waiting: st.waiting,
            // Relaxed: a ledger count.
            in_flight: u128::from(self.in_flight.load(Relaxed)),
            tokens_per_op: TOKENS_PER_OP,
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::Core;
    use crate::clock::ManualClock;
    use crate::limiter::units::TOKENS_PER_OP;

    const US: Duration = Duration::from_micros(1);

    fn core(spec: &str, interval: Duration) -> (Core, ManualClock) {
        let clock = ManualClock::new();
        let spec = spec.parse().expect("a valid spec");
        let core = Core::new(spec, Box::new(clock.clone()), 4, interval, None);
        (core, clock)
    }

    /// With no thread timing the fills, the filler waits two thirds of the
    /// time the active pool covers, between one and two intervals.
    #[test]
    fn the_filler_spaces_its_fills_by_what_the_pool_can_hold() {
        // 100K ops/s: a 1 ms pool, 500 us interval: 666.666 us.
        let (c, clock) = core("100K", 500 * US);
        assert_eq!(c.until_next_fill(500 * US), Duration::from_nanos(666_666));
        clock.advance(600 * US);
        assert_eq!(c.until_next_fill(500 * US), Duration::from_nanos(66_666));
        clock.advance(100 * US);
        assert_eq!(c.until_next_fill(500 * US), Duration::ZERO);
        // 1K ops/s: a pool of two ops (2 ms) would allow 1.333 ms; capped
        // at two intervals.
        let (c, _) = core("1K", 500 * US);
        assert_eq!(c.until_next_fill(500 * US), 1000 * US);
        // A 10 ms interval widens the pool to 15 ms: exactly one interval.
        let (c, _) = core("1K", 10_000 * US);
        assert_eq!(c.until_next_fill(10_000 * US), 10_000 * US);
        // 1M ops/s: the 1 ms pool again.
        let (c, _) = core("1M", 500 * US);
        assert_eq!(c.until_next_fill(500 * US), Duration::from_nanos(666_666));
    }

    /// At 1 op/s a waiter needs no fill before the pool can hold its op:
    /// a second, not two intervals; with a backlog, the burst ratio (1.1)
    /// brings it sooner.
    #[test]
    fn at_a_low_rate_the_filler_waits_for_the_next_op() {
        let (c, clock) = core("1", 500 * US);
        let op = TOKENS_PER_OP;
        assert_eq!(c.until_op(op), 0, "the start allowance is there");
        assert!(c.try_take_fast(op) || c.try_acquire_slow(op));
        assert_eq!(c.until_op(op), 1_000_000_000);
        assert_eq!(
            c.until_next_fill(500 * US),
            Duration::from_nanos(1_000_000_000)
        );
        clock.advance(Duration::from_millis(400));
        assert_eq!(
            c.until_next_fill(500 * US),
            Duration::from_nanos(600_000_000)
        );
        // Two ops: twice as long.
        assert_eq!(c.until_op(2 * op), 2_000_000_000);
        // Ten seconds on, the pool (2.2 ops) is full and 7.8 s are backlog:
        // the pool is served at the burst rate, 1.1 ops/s.
        clock.advance(Duration::from_millis(9_600));
        c.fill_and_wake();
        assert!(c.lateness() > Duration::ZERO);
        assert_eq!(c.available(), 2 * op + op / 5, "A + B = 2.2 ops");
        // 0.8 ops at 909.09 ms each.
        assert_eq!(c.until_op(3 * op), 727_272_900);
        // 1K ops/s: an op is 0.909 ms, under two intervals: as before.
        let (c, _) = core("1K", 500 * US);
        assert!(c.try_take_fast(op) || c.try_acquire_slow(op));
        assert_eq!(c.until_op(op), 0);
        assert_eq!(c.until_next_fill(500 * US), 1000 * US);
    }
}
