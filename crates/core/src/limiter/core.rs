//! The limiter's shared state: where tokens live and how they move.
//!
//! # Implementation notes
//!
//! Tokens live in three places: the per-thread `slices` and the `central`
//! pool together form the active pool `P`; the waiting pool `W` lives in
//! the [`Schedule`] behind the fill lock, with everything else only fills
//! and reconfiguration touch. Takes never lock: the fast path is one
//! compare-exchange on the caller's slice ([`Slices::try_take`]); the slow
//! path refills the slice from `central` in chunks, takes from other
//! slices, fills when the filler is late (with `try_lock`: a caller never
//! blocks on the fill lock), and finally waits.
//!
//! A fill runs the pure [`Pool::fill`](super::pool::Pool::fill) on a
//! snapshot of `P` (central plus the sum of the slices). Concurrent takes
//! can only lower `P` after the snapshot, so `P` stays within `A + B`; a
//! concurrent steal that moves tokens from a slice not yet read into
//! `central` already read can make the snapshot low by at most what the
//! slices held, so `P` may exceed `A + B` transiently by at most `slices *
//! chunk`. Either way each fill adds exactly the measured tokens to `P +
//! W`.
//!
//! Stranding bound: idle slices hold at most `slices * chunk` tokens
//! (`chunk = max(one op, A / (4 * slices))`, so at most a quarter of `A`),
//! and a caller that finds its slice and `central` short takes from the
//! other slices before it waits, so tokens are never stranded while anyone
//! waits for them.
//!
//! Requests up to `A` are all-or-nothing: a caller takes tokens only when
//! enough are there, so waiters never hoard fractions of an op. A request
//! larger than `A` could never find that much at once, so it gathers
//! tokens as they come (counted in `in_flight`) and completes at the
//! average rate; a cancelled request returns what it gathered.
//!
//! The submodules hold the rest of the core, by idea: `acquire` (the slow
//! acquire paths and waiting), `fill` (adding measured time, accounting)
//! and `configure` (start, restart, rate changes, pool sizes).

mod acquire;
pub(crate) use acquire::Check;
mod configure;
mod fill;

use std::time::Duration;

use crossbeam_utils::CachePadded;

use self::configure::sizing_for;

use super::filler::{FillerSignal, Fills};
use super::slice::{move_home, Slices, Take};
use super::spec::{RateSpec, Verb};
use super::units::{Meter, Sizing, TOKENS_PER_OP};
use super::wait::{Source, WaitQueue};
use crate::clock::Clock;
use crate::sync::{lock, static_counter, AtomicU64, Mutex, Ordering::Relaxed};

/// State only fills and reconfiguration touch, behind the fill lock.
#[derive(Debug)]
struct Schedule {
    spec: RateSpec,
    meter: Meter,
    sizing: Sizing,
    /// Remainder of the nanosecond-to-token conversion (< one token).
    carry: u128,
    /// `W`, in tokens.
    waiting: u128,
    /// Clock reading of the last fill (or of start).
    last_fill_ns: u64,
    started: bool,
    max_backlog: Option<Duration>,
    /// `max_backlog` in tokens at the current rate.
    max_waiting: Option<u128>,
    filled: u128,
    dropped: u128,
    /// Admitted tokens seen at the last fill, to integrate `total_wait_ns`.
    admitted_seen: u128,
    total_wait_ns: u128,
    backlog_ns: u64,
}

/// Values the fast and slow paths read, written only under the fill lock.
#[derive(Debug)]
struct Published {
    /// `W` in nanoseconds, as of the last fill.
    backlog_ns: AtomicU64,
    /// Clock reading of the last fill.
    last_fill_ns: AtomicU64,
    /// Tokens a slice takes from `central` beyond its need.
    chunk: AtomicU64,
    /// `A`: requests up to this many tokens are all-or-nothing.
    all_or_nothing: AtomicU64,
    /// Tokens a thread-local budget takes beyond its need (see budget.rs).
    batch: AtomicU64,
    /// Tokens a served waiter is handed beyond its need (see wait.rs).
    handoff: AtomicU64,
    /// How long the filler thread waits between fills while no parked
    /// thread times them (see `Core::until_next_fill`).
    filler_spacing_ns: AtomicU64,
    /// One op of schedule, in ns. At low rates, where it spans several
    /// fill intervals, waiters sleep until a fill can bring their op (see
    /// `Core::until_op`) instead of filling every interval.
    op_ns: AtomicU64,
    /// One op of schedule at the burst rate (`rate * burst_ratio`), in ns:
    /// the soonest a fill can bring an op while there is a backlog.
    burst_op_ns: AtomicU64,
    /// Until this clock reading the filler thread fills on time even while
    /// a thread heads the queue: set when a fill comes late, i.e. when the
    /// machine is too busy to wake the head on time.
    punctual_until_ns: AtomicU64,
}

/// The shared core of a [`RateLimiter`](crate::RateLimiter).
#[derive(Debug)]
pub(crate) struct Core {
    /// Unique among all limiters ever created (budgets are keyed by it).
    id: u64,
    slices: Slices,
    /// Tokens of the active pool not in any slice. Padded: refills and
    /// fills write it, and it must not share a line with `published`.
    central: CachePadded<AtomicU64>,
    published: CachePadded<Published>,
    /// Tokens gathered by large requests that have not completed.
    in_flight: CachePadded<AtomicU64>,
    waiters: WaitQueue,
    filler: FillerSignal,
    schedule: Mutex<Schedule>,
    clock: Box<dyn Clock>,
    fill_interval_ns: u64,
}

impl Core {
    pub(crate) fn new(
        spec: RateSpec,
        clock: Box<dyn Clock>,
        slices: usize,
        fill_interval: Duration,
        max_backlog: Option<Duration>,
    ) -> Core {
        // Filling more often than the clock moves adds nothing: a clock
        // with a coarse step fills once a step, and the pool covers it.
        let fill_interval_ns = u64::try_from(fill_interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(clock.resolution_ns())
            .max(1);
        let meter = Meter::new(spec.nano_ops_per_sec());
        let sizing = sizing_for(&meter, spec.burst_ppm(), fill_interval_ns);
        let now = clock.now_ns();
        static_counter! {
            /// Source of limiter ids; 0 means "none".
            static NEXT_ID = 1;
        }
        let core = Core {
            // Relaxed: only uniqueness matters.
            id: NEXT_ID.fetch_add(1, Relaxed),
            slices: Slices::new(slices),
            central: CachePadded::new(AtomicU64::new(0)),
            published: CachePadded::new(Published {
                backlog_ns: AtomicU64::new(0),
                last_fill_ns: AtomicU64::new(now),
                chunk: AtomicU64::new(0),
                all_or_nothing: AtomicU64::new(0),
                batch: AtomicU64::new(0),
                handoff: AtomicU64::new(0),
                filler_spacing_ns: AtomicU64::new(fill_interval_ns),
                op_ns: AtomicU64::new(0),
                burst_op_ns: AtomicU64::new(0),
                punctual_until_ns: AtomicU64::new(0),
            }),
            in_flight: CachePadded::new(AtomicU64::new(0)),
            waiters: WaitQueue::new(),
            filler: FillerSignal::new(),
            schedule: Mutex::new(Schedule {
                spec,
                meter,
                sizing,
                carry: 0,
                waiting: 0,
                last_fill_ns: now,
                started: false,
                max_backlog,
                max_waiting: None,
                filled: 0,
                dropped: 0,
                admitted_seen: 0,
                total_wait_ns: 0,
                backlog_ns: 0,
            }),
            clock,
            fill_interval_ns,
        };
        {
            let mut st = lock(&core.schedule);
            core.publish_sizes(&mut st);
            if spec.verb() != Verb::Configure {
                core.start_locked(&mut st, now);
            }
        }
        core
    }

    pub(crate) fn filler_signal(&self) -> &FillerSignal {
        &self.filler
    }

    /// This limiter's unique id.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Tokens a thread-local budget takes beyond its need; 0 disables budgets.
    #[inline]
    pub(crate) fn batch_tokens(&self) -> u64 {
        // Relaxed: a size hint written under the fill lock.
        self.published.batch.load(Relaxed)
    }

    /// Takes back tokens a thread-local budget did not use.
    pub(crate) fn return_tokens(&self, tokens: u64) {
        self.put_back(tokens);
    }

    /// The limiter's clock reading.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(crate) fn has_waiters(&self) -> bool {
        self.waiters.has_waiters()
    }

    // ----- fast path ---------------------------------------------------

    /// The backlog as of the last fill: how late an op admitted now starts.
    #[inline]
    pub(crate) fn lateness(&self) -> Duration {
        // Relaxed: a gauge written under the fill lock; any recent value will do.
        Duration::from_nanos(self.published.backlog_ns.load(Relaxed))
    }

    /// Takes `need` tokens from the caller's slice; `false` sends the caller
    /// to a slow path.
    #[inline]
    pub(crate) fn try_take_fast(&self, need: u64) -> bool {
        match self.slices.try_take(need) {
            Take::Taken => true,
            Take::Short => false,
            Take::Contended => {
                move_home();
                false
            }
        }
    }

    // ----- moving tokens (for the slow paths, fills and hand-offs) ------

    /// Takes up to `want` tokens: the home slice, then `central`, then the
    /// other slices, refilling the home slice with a chunk on the way.
    fn gather(&self, want: u64) -> u64 {
        let mut got = self.slices.take_home(want);
        if got == want {
            return got;
        }
        // Take a chunk beyond the need, from `central` and then from the
        // other slices (which may hold what idle threads left), and keep the
        // extra in the home slice: a thread that found its slice empty
        // should not come back for every op.
        // Relaxed: a size hint written under the fill lock.
        let target = want.saturating_add(self.published.chunk.load(Relaxed));
        got += take_up_to(&self.central, target - got);
        if got < target {
            got += self.slices.steal(target - got);
        }
        if got > want {
            self.slices.put_home(got - want);
            got = want;
            // The extra was out of sight of the pool for a moment: a
            // waiter that re-checked then must not sleep on it.
            self.wake_for_returned();
        }
        got
    }

    /// Tokens in the active pool: a snapshot.
    fn available(&self) -> u64 {
        // Relaxed: tokens carry no data (see slice.rs).
        self.central.load(Relaxed) + self.slices.total()
    }

    /// Returns tokens to `central` and serves the waiters.
    fn put_back(&self, tokens: u64) {
        if tokens == 0 {
            return;
        }
        // Relaxed: the fence in `WaitQueue::serve` orders it before the
        // waiter check.
        self.central.fetch_add(tokens, Relaxed);
        self.serve();
    }

    /// Hands what the pool holds to the waiters, in queue order.
    fn serve(&self) {
        self.waiters.serve(self, self.handoff_tokens());
    }

    /// After tokens went out of sight of the pool and came back (a chunk
    /// kept in the home slice): a waiter may have re-checked meanwhile and
    /// queued; serve it.
    fn wake_for_returned(&self) {
        self.serve();
    }

    /// Tokens a served waiter is handed beyond its need.
    fn handoff_tokens(&self) -> u64 {
        // Relaxed: a size hint written under the fill lock.
        self.published.handoff.load(Relaxed)
    }
}

impl Fills for Core {
    fn filler_signal(&self) -> &FillerSignal {
        &self.filler
    }

    fn has_waiters(&self) -> bool {
        self.waiters.has_waiters()
    }

    fn until_next_fill(&self, interval: Duration) -> Duration {
        Core::until_next_fill(self, interval)
    }

    fn fill_and_wake(&self) {
        Core::fill_and_wake(self);
    }
}

impl Source for Core {
    fn take_exact(&self, need: u64) -> bool {
        if self.available() < need {
            return false;
        }
        let mut got = take_up_to(&self.central, need);
        if got < need {
            got += self.slices.steal_all(need - got);
        }
        if got == need {
            return true;
        }
        self.put_raw(got);
        false
    }

    fn take_up_to(&self, max: u64) -> u64 {
        let got = take_up_to(&self.central, max);
        if got < max {
            got + self.slices.steal_all(max - got)
        } else {
            got
        }
    }

    fn take_handoff(&self, max: u64) -> u64 {
        let got = Source::take_up_to(self, max);
        let spare = got % TOKENS_PER_OP;
        self.put_raw(spare);
        got - spare
    }

    fn put_raw(&self, tokens: u64) {
        if tokens > 0 {
            // Relaxed: tokens carry no data; the queue's serve orders them.
            self.central.fetch_add(tokens, Relaxed);
        }
    }

    fn in_flight(&self, add: u64, sub: u64) {
        // Relaxed: a ledger count; see `Core::ledger`.
        if add > 0 {
            self.in_flight.fetch_add(add, Relaxed);
        }
        if sub > 0 {
            self.in_flight.fetch_sub(sub, Relaxed);
        }
    }

    fn head_untimed(&self) {
        // The filler may be in a long sleep, standing back for the thread
        // that headed the queue: the task now at the front needs it on time.
        self.filler.hurry();
    }
}

/// Takes up to `max` tokens from an atomic pool.
fn take_up_to(pool: &AtomicU64, max: u64) -> u64 {
    // Relaxed: tokens carry no data (see slice.rs).
    let mut have = pool.load(Relaxed);
    loop {
        if have == 0 || max == 0 {
            return 0;
        }
        let taken = have.min(max);
        match pool.compare_exchange_weak(have, have - taken, Relaxed, Relaxed) {
            Ok(_) => return taken,
            Err(now) => have = now,
        }
    }
}
