//! The limiter's shared state and its acquire paths.
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
//! A fill runs the pure [`Pool::fill`] on a snapshot of `P` (central plus
//! the sum of the slices). Concurrent takes can only lower `P` after the
//! snapshot, so `P` stays within `A + B`; a concurrent steal that moves
//! tokens from a slice not yet read into `central` already read can make
//! the snapshot low by at most what the slices held, so `P` may exceed
//! `A + B` transiently by at most `slices * chunk`. Either way each fill
//! adds exactly the measured tokens to `P + W`.
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

use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::filler::FillerSignal;
use super::pool::Pool;
use super::slice::{move_home, Slices, Take};
use super::spec::{RateSpec, Verb};
use super::units::{mul_div, Meter, Sizing, TOKENS_PER_OP};
use super::wait::{Cancel, Source, WaitQueue, Waiter};
use crate::clock::Clock;
use crate::sync::{
    current, lock, park, park_timeout, static_counter, try_lock, AtomicU64, Mutex,
    Ordering::Relaxed,
};

/// Counters of a limiter, taken at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Ops admitted since the limiter was created (weighted: `acquire_n(5)`
    /// counts 5), in whole ops. Ops a thread takes ahead into its local
    /// budget count when taken (at most 64 per thread, at high rates).
    pub admitted: u64,
    /// Sum over admitted ops of how late each started (the backlog when it
    /// was admitted), integrated at fill granularity.
    pub total_wait: Duration,
    /// The backlog at the last fill: how late an op admitted now starts.
    pub backlog: Duration,
}

/// Every token the limiter has handed out or holds, for exact accounting
/// in tests and model checks: `filled - dropped == admitted + active +
/// waiting + in_flight`, where `admitted` is what ops took.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ledger {
    /// Tokens ever added (measured time, start allowances, rescaling).
    pub filled: u128,
    /// Tokens discarded (backlog cap, restarts).
    pub dropped: u128,
    /// Tokens in the active pool (central plus slices).
    pub active: u128,
    /// Tokens in the waiting pool.
    pub waiting: u128,
    /// Tokens gathered by requests larger than the active pool, not yet admitted.
    pub in_flight: u128,
    /// Tokens one op costs.
    pub tokens_per_op: u64,
}

/// The most ops a thread-local budget holds.
const MAX_BATCH_OPS: u64 = 64;
/// The most ops one hand-off gives a waiter beyond its need (wait.rs).
const MAX_HANDOFF_OPS: u64 = 256;
/// A head waiter whose fill is due within this many nanoseconds spins
/// instead of parking: a park and unpark cost more than the wait.
const SPIN_NS: u64 = 5_000;
/// How long the filler thread stays punctual after a late fill.
const PUNCTUAL_NS: u64 = 200_000_000;
/// The shortest sleep of a head waiter that found the fill due but could
/// not do it (another thread holds the fill lock and will serve the queue).
const MIN_PARK_NS: u64 = 20_000;

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

/// How the caller of a slow path waits.
#[derive(Debug, Clone, Copy)]
enum Partial {
    /// All-or-nothing.
    No,
    /// Gather tokens as they come.
    Yes,
}

impl Core {
    pub(crate) fn new(
        spec: RateSpec,
        clock: Box<dyn Clock>,
        slices: usize,
        fill_interval: Duration,
        max_backlog: Option<Duration>,
    ) -> Core {
        let fill_interval_ns = u64::try_from(fill_interval.as_nanos())
            .unwrap_or(u64::MAX)
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

    // ----- slow paths --------------------------------------------------

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

    /// Tokens a served waiter is handed beyond its need; 0 in the loom
    /// build, which has no thread budgets to keep them in.
    fn handoff_tokens(&self) -> u64 {
        // Relaxed: a size hint written under the fill lock.
        self.published.handoff.load(Relaxed)
    }

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
        match self.wait(need, None) {
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
        self.wait(need, Some(deadline_ns))
    }

    /// The blocking wait: queue a node for this thread and park until it is
    /// granted. The queue's head parks only until the next fill is due (a
    /// quarter interval of grace for the filler thread) and then fills by
    /// itself.
    fn wait(&self, need: u64, deadline: Option<u64>) -> Option<u64> {
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
        loop {
            if let Some(extra) = node.granted() {
                return Some(extra);
            }
            let now = self.clock.now_ns();
            let mut sleep = None;
            if let Some(deadline) = deadline {
                if now >= deadline {
                    return match self.waiters.cancel(&node, self, self.handoff_tokens()) {
                        Cancel::Granted(extra) => Some(extra),
                        Cancel::Left => None,
                    };
                }
                sleep = Some(deadline - now);
            }
            if node.is_head() {
                let due = self.head_fill_due();
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

    /// When the head waiter fills by itself: when the next fill is due.
    /// While a thread heads the queue, the filler thread stands back (see
    /// `until_next_fill`), so the head's wake-up is the fill, and a head
    /// served by its own fill needs no other wake.
    fn head_fill_due(&self) -> u64 {
        // Relaxed: a hint; the fill reads its time under the lock.
        let last = self.published.last_fill_ns.load(Relaxed);
        last.saturating_add(self.fill_interval_ns)
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

    /// One poll of an async acquire; see [`AcquireFuture`](super::future::AcquireFuture).
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

    // ----- filling -----------------------------------------------------

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
        if added > 0 {
            self.serve();
        }
        added > 0
    }

    /// Fills now (blocking on the fill lock) and wakes waiters.
    pub(crate) fn fill_and_wake(&self) {
        let now = self.clock.now_ns();
        let mut st = lock(&self.schedule);
        let added = self.fill_locked(&mut st, now);
        drop(st);
        if added > 0 {
            self.serve();
        }
    }

    /// How long the filler thread sleeps before its next fill: until it is
    /// due, or, while a parked thread heads the queue and fills on time by
    /// itself, three intervals more (the filler is then only a backup).
    /// After a late fill the filler is punctual again for a while: two
    /// timers are likelier than one to run on time on a busy machine.
    pub(crate) fn until_next_fill(&self, interval: Duration) -> Duration {
        // Relaxed: hints.
        let last = self.published.last_fill_ns.load(Relaxed);
        let now = self.clock.now_ns();
        let since = now.saturating_sub(last);
        let punctual = now < self.published.punctual_until_ns.load(Relaxed);
        let wait = if self.waiters.has_timed_head() && !punctual {
            interval.saturating_mul(4)
        } else {
            interval
        };
        wait.saturating_sub(Duration::from_nanos(since))
    }

    /// The fill (spec §2) on a snapshot of the active pool. Returns the
    /// tokens added to the active pool.
    fn fill_locked(&self, st: &mut Schedule, now: u64) -> u64 {
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

    // ----- lifecycle and configuration -----------------------------------

    /// Starts: time counts from `now` and the first op passes at once.
    fn start_locked(&self, st: &mut Schedule, now: u64) {
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

    /// Changes rate and burst ratio: the pools keep their time, `P` is
    /// clamped to the new `A + B` (the excess joins the backlog).
    fn reschedule_locked(&self, st: &mut Schedule, spec: RateSpec) {
        let meter = Meter::new(spec.nano_ops_per_sec());
        let sizing = sizing_for(&meter, spec.burst_ppm(), self.fill_interval_ns);
        // Relaxed: tokens carry no data.
        let active = u128::from(self.central.swap(0, Relaxed) + self.slices.drain());
        let rescaled_active = st.meter.rescale(active, &meter);
        let rescaled_waiting = st.meter.rescale(st.waiting, &meter);
        let kept = rescaled_active.min(u128::from(sizing.max_over()));
        let waiting = rescaled_waiting + (rescaled_active - kept);
        st.filled = st.filled - (active + st.waiting) + (kept + waiting);
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
    fn publish_sizes(&self, st: &mut Schedule) {
        let slices = self.slices.len() as u64;
        let chunk = (st.sizing.active / (4 * slices)).max(TOKENS_PER_OP);
        // Budgets only where a slice chunk holds several ops (budget.rs).
        let batch = (chunk / 4).min(MAX_BATCH_OPS * TOKENS_PER_OP);
        let batch = if cfg!(tollgate_loom) || batch < TOKENS_PER_OP {
            0
        } else {
            batch
        };
        // A waiter served by hand-off takes whole ops beyond its need, up
        // to a quarter of the active pool (wait.rs), where budgets exist.
        let handoff_ops = (st.sizing.active / 4 / TOKENS_PER_OP).min(MAX_HANDOFF_OPS);
        let handoff = if cfg!(tollgate_loom) {
            0
        } else {
            handoff_ops * TOKENS_PER_OP
        };
        // Relaxed: size hints; see `Published`.
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

    /// Applies a spec (spec §4): `configure` sets rate and ratio without
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
}

/// The pool sizes for a spec, with the active pool widened to cover at
/// least one and a half fill intervals, so a fill that comes up to half an
/// interval late still fits instead of spilling into the backlog (at a
/// 1K rate and a 10 ms interval, a 1 ms pool would admit under 200 ops a
/// second). The burst headroom keeps its ratio to the active pool.
fn sizing_for(meter: &Meter, burst_ppm: u64, fill_interval_ns: u64) -> Sizing {
    let base = Sizing::new(meter, burst_ppm);
    let span = fill_interval_ns.saturating_add(fill_interval_ns / 2);
    let wide = meter.tokens_floor(span);
    if wide <= u128::from(base.active) {
        return base;
    }
    // As in `Sizing::new`: A + B stays below 2^62.
    let active = u64::try_from(wide).unwrap_or(u64::MAX).min(u64::MAX >> 3);
    let burst = mul_div(
        u128::from(active),
        u128::from(burst_ppm.saturating_sub(1_000_000)),
        1_000_000,
    );
    Sizing {
        active,
        burst: u64::try_from(burst).unwrap_or(u64::MAX).min(u64::MAX >> 3),
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
