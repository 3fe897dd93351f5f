//! Lifecycle and configuration: starting, restarting, live rate changes
//! (`docs/design/token-pool.md` §5), and the pool and batch sizes that
//! follow from a spec.

use std::time::Duration;

use super::{Core, Schedule};
use crate::limiter::spec::{RateSpec, Verb};
use crate::limiter::units::{mul_div, Meter, Sizing, TOKENS_PER_OP};
use crate::sync::{lock, Ordering::Relaxed};

/// The most ops a thread-local budget holds.
const MAX_BATCH_OPS: u64 = 64;
/// The most ops one hand-off gives a waiter beyond its need (wait.rs).
const MAX_HANDOFF_OPS: u64 = 512;
/// A burst ratio of 1.0, in the spec's parts per million.
const PPM: u128 = 1_000_000;

impl Core {
    /// Starts: time counts from `now` and the first op passes at once.
    pub(super) fn start_locked(&self, st: &mut Schedule, now: u64) {
        st.started = true;
        st.last_fill_ns = now;
        // Relaxed: a hint.
        self.published.last_fill_ns.store(now, Relaxed);
        st.filled += u128::from(TOKENS_PER_OP);
        // Relaxed: published to waiters by the caller's serve.
        self.central.fetch_add(TOKENS_PER_OP, Relaxed);
    }

    /// Clears the pools and the backlog, as if new, and starts.
    fn restart_locked(&self, st: &mut Schedule, now: u64) {
        // Relaxed: tokens carry no data.
        let active = self.central.swap(0, Relaxed) + self.slices.drain();
        st.dropped += u128::from(active) + st.waiting;
        st.waiting = 0;
        st.carry = 0;
        st.backlog_ns = 0;
        self.published.backlog_ns.store(0, Relaxed);
        self.start_locked(st, now);
    }

    /// Changes rate and burst ratio: the backlog `W` keeps its time, `P`
    /// keeps its time up to the new `A + B` and the excess is dropped.
    ///
    /// The excess is not backlog: `P` holds ops that may start now without
    /// being late, never ops that are overdue. At a low rate it is large
    /// (one op at 0.001 ops/s, the start allowance, is 1000 s), and a limiter
    /// waiting at that rate for its real one (a lease) would otherwise
    /// report every op after the change 1000 s late.
    fn reschedule_locked(&self, st: &mut Schedule, spec: RateSpec) {
        let meter = Meter::new(spec.nano_ops_per_sec());
        let sizing = sizing_for(&meter, spec.burst_ppm(), self.fill_interval_ns);
        // Relaxed: tokens carry no data.
        let active = u128::from(self.central.swap(0, Relaxed) + self.slices.drain());
        let rescaled_active = st.meter.rescale(active, &meter);
        let waiting = st.meter.rescale(st.waiting, &meter);
        let kept = rescaled_active.min(u128::from(sizing.max_over()));
        st.filled = st.filled - (active + st.waiting) + (rescaled_active + waiting);
        st.dropped += rescaled_active - kept;
        st.waiting = waiting;
        st.carry = 0;
        st.spec = spec;
        st.meter = meter;
        st.sizing = sizing;
        // kept <= max_over < 2^62.
        self.central.fetch_add(kept as u64, Relaxed);
        self.publish_sizes(st);
        st.backlog_ns = st.meter.nanos_for(st.waiting);
        self.published.backlog_ns.store(st.backlog_ns, Relaxed);
    }

    /// Publishes chunk and all-or-nothing sizes and the backlog cap in tokens.
    pub(super) fn publish_sizes(&self, st: &mut Schedule) {
        let slices = self.slices.len() as u64;
        let chunk = (st.sizing.active / (4 * slices)).max(TOKENS_PER_OP);
        // Budgets only where a slice chunk holds several ops (budget.rs).
        let batch = (chunk / 4).min(MAX_BATCH_OPS * TOKENS_PER_OP);
        let batch = if batch < TOKENS_PER_OP { 0 } else { batch };
        // A waiter served by hand-off takes whole ops beyond its need, up
        // to the active pool (wait.rs): all that a fill tops the pool up
        // to, the filler's longer spacing below and a late fill included,
        // so a fill wakes one waiter, not two. Each wake costs far more
        // than the ops it admits (a task woken from the filler thread
        // wakes two runtime workers under tokio: the one that runs it and
        // a searching one), and the ops of one fill may start together.
        let handoff_ops = (st.sizing.active / TOKENS_PER_OP).min(MAX_HANDOFF_OPS);
        let handoff = handoff_ops * TOKENS_PER_OP;
        // The filler may space its fills by up to two thirds of the time
        // the active pool covers: a fill that then comes half a spacing
        // late still fits in the pool (the same slack `sizing_for` gives
        // the fill interval), and each wake-up serves more ops. At most
        // two intervals: an op whose time has come waits for the next fill,
        // so a longer spacing would delay it more than the backlog shows.
        let pool_ns = st.meter.nanos_for(u128::from(st.sizing.active));
        let spacing = (pool_ns / 3 * 2)
            .min(self.fill_interval_ns.saturating_mul(2))
            .max(self.fill_interval_ns);
        let op_ns = u128::from(st.meter.nanos_for(u128::from(TOKENS_PER_OP)));
        let burst_op_ns = mul_div(op_ns, PPM, u128::from(st.spec.burst_ppm()));
        // Relaxed: size hints; see `Published`.
        self.published.filler_spacing_ns.store(spacing, Relaxed);
        self.published
            .op_ns
            .store(u64::try_from(op_ns).unwrap_or(u64::MAX), Relaxed);
        self.published
            .burst_op_ns
            .store(u64::try_from(burst_op_ns).unwrap_or(u64::MAX), Relaxed);
        self.published.chunk.store(chunk, Relaxed);
        self.published.batch.store(batch, Relaxed);
        self.published.handoff.store(handoff, Relaxed);
        self.published
            .all_or_nothing
            .store(st.sizing.active, Relaxed);
        st.max_waiting = st.max_backlog.map(|cap| {
            st.meter
                .tokens_floor(u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX))
        });
    }

    /// Applies a spec (`docs/design/token-pool.md` §5): `configure` sets rate and ratio without
    /// starting, `start` also starts an idle limiter, `restart` clears the
    /// pools and the backlog and starts afresh. An equal schedule is a no-op.
    pub(crate) fn apply(&self, spec: RateSpec) {
        let now = self.clock.now_ns();
        let mut st = lock(&self.schedule);
        let changed = !st.spec.same_schedule(&spec);
        if changed {
            // Credit the time so far at the old rate.
            self.fill_locked(&mut st, now);
            self.reschedule_locked(&mut st, spec);
        }
        st.spec = spec;
        let woke = match spec.verb() {
            Verb::Configure => changed,
            Verb::Start if st.started => changed,
            Verb::Start => {
                self.start_locked(&mut st, now);
                true
            }
            Verb::Restart => {
                self.restart_locked(&mut st, now);
                true
            }
        };
        drop(st);
        if woke {
            self.serve();
        }
    }

    pub(crate) fn spec(&self) -> RateSpec {
        lock(&self.schedule).spec
    }

    pub(crate) fn set_max_backlog(&self, cap: Option<Duration>) {
        let mut st = lock(&self.schedule);
        st.max_backlog = cap;
        self.publish_sizes(&mut st);
    }

    pub(crate) fn max_backlog(&self) -> Option<Duration> {
        lock(&self.schedule).max_backlog
    }

    /// Brings the pool up to date with the clock and returns the backlog.
    pub(crate) fn backlog(&self) -> Duration {
        self.fill_and_wake();
        self.lateness()
    }
}

/// The pool sizes for a spec, with the active pool widened to cover at
/// least one and a half fill intervals, so a fill that comes up to half an
/// interval late still fits instead of spilling into the backlog (at a
/// 1K rate and a 10 ms interval, a 1 ms pool would admit under 200 ops a
/// second).
pub(super) fn sizing_for(meter: &Meter, burst_ppm: u64, fill_interval_ns: u64) -> Sizing {
    Sizing::new(meter, burst_ppm).covering(meter, burst_ppm, fill_interval_ns)
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::Core;
    use crate::clock::ManualClock;
    use crate::limiter::units::TOKENS_PER_OP;

    fn handoff_ops(spec: &str) -> u64 {
        let spec = spec.parse().expect("a valid spec");
        let interval = Duration::from_micros(500);
        let core = Core::new(spec, Box::new(ManualClock::new()), 4, interval, None);
        core.handoff_tokens() / TOKENS_PER_OP
    }

    /// A served waiter is handed up to the active pool (whatever one fill
    /// tops it up to), at most 512 ops.
    #[test]
    fn a_hand_off_is_the_active_pool_up_to_512_ops() {
        assert_eq!(handoff_ops("1K"), 2, "a pool of two ops");
        assert_eq!(handoff_ops("100K"), 100, "a 1 ms pool of 100 ops");
        assert_eq!(handoff_ops("300K"), 300);
        assert_eq!(handoff_ops("1M"), 512);
        assert_eq!(handoff_ops("10M"), 512);
    }
}
