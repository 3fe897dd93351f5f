//! The public [`RateLimiter`]: a sliced, lock-free token pool that holds an
//! op rate exactly and reports how far callers fell behind schedule.

mod budget;
mod core;
mod filler;
mod future;
pub(crate) mod pool;
mod recipient;
mod slice;
pub mod spec;
mod stats;
pub(crate) mod token_bucket;
pub(crate) mod units;
mod wait;

use std::fmt;
use std::time::Duration;

use self::budget::{keep_extra, take_fast};
use self::core::{Check, Core};
pub use self::future::AcquireFuture;
use self::spec::RateSpec;
pub(crate) use self::stats::Ledger;
pub use self::stats::Stats;
use self::units::{tokens_for_ops, MAX_OPS_PER_ACQUIRE};
use crate::clock::{Clock, SystemClock};
use crate::sync::{spawn_named, Arc, JoinHandle};

/// A rate limiter whose currency is schedule time.
///
/// Each op costs one op-slot of schedule (`1 / rate` seconds). A filler adds
/// measured time to an *active* pool; time that does not fit goes to a
/// *waiting* pool, the backlog, which is exactly how late an op admitted now
/// starts versus its schedule (its coordinated-omission wait). While a
/// backlog exists, ops may run at up to `rate * burst_ratio` to catch up.
///
/// Acquires take tokens from a per-thread, cache-padded slice of the active
/// pool with one compare-exchange: no lock, no clock read and no write to a
/// shared cache line on the fast path. Blocked callers wait in one FIFO
/// queue, each parked on its own, and are woken only once their tokens
/// have been handed to them. See the crate docs for the design.
///
/// `RateLimiter` is `Send + Sync`: share it by reference or in an `Arc`.
///
/// # Examples
///
/// ```
/// use tollgate::{RateLimiter, RateSpec};
///
/// let spec: RateSpec = "1000,1.1".parse()?;
/// let limiter = RateLimiter::new(spec);
/// let late = limiter.acquire(); // the first op passes at once
/// assert!(late.as_secs() < 1);
/// assert_eq!(limiter.stats().admitted, 1);
/// # Ok::<(), tollgate::SpecError>(())
/// ```
pub struct RateLimiter {
    core: Arc<Core>,
    filler: Option<JoinHandle<()>>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("spec", &self.core.spec())
            .field("backlog", &self.core.lateness())
            .finish()
    }
}

/// The error of [`RateLimiter::acquire_timeout`]: the tokens could not be
/// granted within the wait allowed; nothing was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutError {
    max_wait: Duration,
}

impl TimeoutError {
    /// The wait that was allowed.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

impl fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit: no capacity within {:?}", self.max_wait)
    }
}

impl std::error::Error for TimeoutError {}

/// The error of [`RateLimiter::acquire_n_interruptible`]: the caller's
/// `stop` answered `true` before the tokens were granted; nothing was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rate limit: the wait was interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Options for a [`RateLimiter`]; start with [`RateLimiter::builder`].
#[derive(Debug)]
pub struct RateLimiterBuilder {
    spec: RateSpec,
    clock: Option<Box<dyn Clock>>,
    slices: Option<usize>,
    fill_interval: Duration,
    max_backlog: Option<Duration>,
    filler_thread: bool,
}

impl RateLimiterBuilder {
    /// The clock to measure time with (default: [`SystemClock`]). Tests pass
    /// a [`ManualClock`](crate::ManualClock).
    pub fn clock(mut self, clock: impl Clock) -> RateLimiterBuilder {
        self.clock = Some(Box::new(clock));
        self
    }

    /// How many slices the active pool is split into (rounded up to a power
    /// of two; default: four per available core, at most 64). One slice
    /// makes a single shared pool.
    pub fn slices(mut self, slices: usize) -> RateLimiterBuilder {
        self.slices = Some(slices.clamp(1, 1024));
        self
    }

    /// How often the filler thread adds time while callers wait (default
    /// 500 µs: half the 1 ms active pool of high rates, so a fill that comes
    /// somewhat late still fits in it rather than spilling into the
    /// backlog). Callers fill by themselves when a fill is an interval late.
    /// The active pool covers at least one and a half intervals, so any
    /// interval (100 µs to 1 s and beyond) holds the rate; a longer one
    /// only makes ops start in larger bursts. While only the filler thread
    /// times the fills (async tasks wait), it spaces them by up to two
    /// intervals, as far as the active pool still covers one and a half
    /// spacings (at 100K ops/s: 667 µs), so each of its wake-ups serves more
    /// ops. With a clock whose step is longer (see
    /// [`Clock::resolution_ns`]), the interval is that step.
    ///
    /// A longer interval trades when ops start for CPU: with a thousand
    /// tasks waiting at 100K ops/s, 2 ms makes each fill serve 200 ops
    /// rather than 67 and cuts the CPU per op by about 2.5 times (the
    /// `crowd` bench), while an op may start up to 2 ms after its slot.
    ///
    /// An interval below 10 µs is taken as 10 µs: the filler thread would
    /// otherwise spend its time going to sleep.
    pub fn fill_interval(mut self, interval: Duration) -> RateLimiterBuilder {
        self.fill_interval = interval.max(Duration::from_micros(10));
        self
    }

    /// Caps the backlog (default: unbounded, as a benchmark schedule needs).
    /// A service whose limiter sat idle should not then run fast for hours:
    /// time beyond the cap is dropped.
    pub fn max_backlog(mut self, cap: Duration) -> RateLimiterBuilder {
        self.max_backlog = Some(cap);
        self
    }

    /// Whether to run the filler thread (default: yes). Without it, time is
    /// added only when callers find a fill an interval late or call
    /// [`RateLimiter::backlog`]: for deterministic tests on a manual clock.
    pub fn filler_thread(mut self, run: bool) -> RateLimiterBuilder {
        self.filler_thread = run;
        self
    }

    /// Builds the limiter; it starts unless the spec's verb is `configure`.
    ///
    /// # Panics
    ///
    /// If the operating system refuses the filler thread (a process at its
    /// thread limit); [`RateLimiterBuilder::try_build`] returns that error instead.
    pub fn build(self) -> RateLimiter {
        self.try_build()
            .unwrap_or_else(|e| panic!("tollgate: cannot spawn the filler thread: {e}"))
    }

    /// Builds the limiter, or returns the error of spawning its filler
    /// thread, for a process that may be at its thread limit.
    ///
    /// ```
    /// let limiter = tollgate::RateLimiter::builder("1K".parse()?).try_build()?;
    /// assert_eq!(limiter.spec().to_string(), "1K,1.1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The [`std::io::Error`] of [`std::thread::Builder::spawn`].
    pub fn try_build(self) -> std::io::Result<RateLimiter> {
        let slices = self.slices.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores * 4).min(64)
        });
        let clock = self.clock.unwrap_or_else(|| Box::new(SystemClock::new()));
        let core = Arc::new(Core::new(
            self.spec,
            clock,
            slices,
            self.fill_interval,
            self.max_backlog,
        ));
        let filler = if self.filler_thread {
            Some(spawn_filler(&core, self.fill_interval)?)
        } else {
            None
        };
        Ok(RateLimiter { core, filler })
    }
}

/// Starts the filler thread (a model thread under loom, where the models
/// drive it with a manual clock).
fn spawn_filler(core: &Arc<Core>, interval: Duration) -> std::io::Result<JoinHandle<()>> {
    let core = Arc::clone(core);
    spawn_named("tollgate-filler", move || filler::run(core, interval))
}

/// The filler's default period: half the smallest active pool (1 ms), so
/// a filler waking up to 500 µs late still fits each fill in the pool.
/// With a period equal to the pool, every wake-up delay spilled into the
/// backlog: at ratio 1.0 a 1M ops/s limiter admitted only 93% of its rate,
/// and at ratio 1.5 it caught up at 1.4x. A shorter period tolerates more
/// lateness but wakes the filler and the blocked callers more often: at
/// 250 µs, 8 callers blocked at 1M ops/s cost 200-280 ns of CPU per op on
/// a loaded 2-core machine, against 140-160 ns at 500 µs.
const DEFAULT_FILL_INTERVAL: Duration = Duration::from_micros(500);

/// Panics with a clear message on a weight the pool cannot represent.
#[inline]
fn tokens(n: u64) -> u64 {
    assert!(
        n <= MAX_OPS_PER_ACQUIRE,
        "tollgate: acquire_n({n}) exceeds the largest weight, {MAX_OPS_PER_ACQUIRE}"
    );
    tokens_for_ops(n)
}

impl RateLimiter {
    /// The largest weight one acquire may ask for (about 8.8e12 ops).
    pub const MAX_WEIGHT: u64 = MAX_OPS_PER_ACQUIRE;

    /// A limiter for `spec` with default options, started unless the
    /// spec's verb is `configure`.
    ///
    /// # Panics
    ///
    /// As [`RateLimiterBuilder::build`]: if the filler thread cannot be spawned.
    pub fn new(spec: RateSpec) -> RateLimiter {
        RateLimiter::builder(spec).build()
    }

    /// A builder for a limiter with non-default options.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = RateLimiter::builder("100".parse()?)
    ///     .clock(clock.clone())
    ///     .filler_thread(false)
    ///     .max_backlog(Duration::from_secs(1))
    ///     .build();
    /// assert!(limiter.try_acquire()); // the start allowance
    /// assert!(!limiter.try_acquire()); // no time has passed
    /// clock.advance(Duration::from_millis(10)); // one op of time at 100/s
    /// assert_eq!(limiter.backlog(), Duration::ZERO);
    /// assert!(limiter.try_acquire());
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    pub fn builder(spec: RateSpec) -> RateLimiterBuilder {
        RateLimiterBuilder {
            spec,
            clock: None,
            slices: None,
            fill_interval: DEFAULT_FILL_INTERVAL,
            max_backlog: None,
            filler_thread: true,
        }
    }

    /// Blocks until one op may start; returns how late it starts versus its
    /// schedule slot (the backlog).
    #[inline]
    pub fn acquire(&self) -> Duration {
        self.acquire_n(1)
    }

    /// Blocks until an op of weight `n` may start; returns how late it
    /// starts. `acquire_n(0)` returns at once. A weight larger than the
    /// active pool gathers tokens as they come and completes at the average
    /// rate.
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`RateLimiter::MAX_WEIGHT`].
    #[inline]
    pub fn acquire_n(&self, n: u64) -> Duration {
        let need = tokens(n);
        if need != 0 && !take_fast(&self.core, need) {
            let extra = self.core.acquire_blocking(need);
            keep_extra(&self.core, extra);
        }
        self.core.lateness()
    }

    /// Takes one op's tokens if they are there now.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        self.try_acquire_n(1)
    }

    /// Takes an op of weight `n` if its tokens are all there now; never
    /// waits, and takes nothing when it fails.
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`RateLimiter::MAX_WEIGHT`].
    #[inline]
    pub fn try_acquire_n(&self, n: u64) -> bool {
        let need = tokens(n);
        need == 0 || take_fast(&self.core, need) || self.core.try_acquire_slow(need)
    }

    /// Like [`acquire_n`](RateLimiter::acquire_n), but waits at most
    /// `max_wait` (measured on the limiter's clock).
    ///
    /// # Errors
    ///
    /// [`TimeoutError`] if the tokens cannot be granted within `max_wait`.
    /// It fails at once, without waiting, when even the burst rate could not
    /// deliver them in time. On error nothing is taken.
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`RateLimiter::MAX_WEIGHT`].
    pub fn acquire_timeout(&self, n: u64, max_wait: Duration) -> Result<Duration, TimeoutError> {
        let need = tokens(n);
        if need == 0 || take_fast(&self.core, need) {
            return Ok(self.core.lateness());
        }
        let now = self.core.now_ns();
        let wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        match self.core.acquire_until(need, now.saturating_add(wait)) {
            Some(extra) => {
                keep_extra(&self.core, extra);
                Ok(self.core.lateness())
            }
            None => Err(TimeoutError { max_wait }),
        }
    }

    /// Like [`acquire_n`](RateLimiter::acquire_n), but while it waits it
    /// asks `stop` at least every `check_every` of real time, and gives up
    /// when `stop` answers `true`: the way to wait in a thread that must
    /// also notice a cancellation, a shutdown flag or a signal (the Python
    /// bindings check for Ctrl-C here). The caller keeps its place in the
    /// queue between checks. `stop` is not asked when the tokens are there
    /// at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use tollgate::{Interrupted, RateLimiter};
    ///
    /// let limiter = RateLimiter::new("0.001".parse()?); // one op in 1,000 s
    /// limiter.acquire(); // the start allowance
    /// let shutdown = AtomicBool::new(true);
    /// let got = limiter.acquire_n_interruptible(1, Duration::from_millis(10), || {
    ///     shutdown.load(Ordering::Relaxed)
    /// });
    /// assert_eq!(got, Err(Interrupted));
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Interrupted`] when `stop` answered `true` before the tokens were
    /// granted; nothing is taken. A grant that races the answer wins: the
    /// call then returns `Ok`.
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`RateLimiter::MAX_WEIGHT`].
    pub fn acquire_n_interruptible(
        &self,
        n: u64,
        check_every: Duration,
        mut stop: impl FnMut() -> bool,
    ) -> Result<Duration, Interrupted> {
        let need = tokens(n);
        if need == 0 || take_fast(&self.core, need) {
            return Ok(self.core.lateness());
        }
        let check = Check {
            every: check_every,
            stop: &mut stop,
        };
        match self.core.acquire_checked(need, check) {
            Some(extra) => {
                keep_extra(&self.core, extra);
                Ok(self.core.lateness())
            }
            None => Err(Interrupted),
        }
    }

    /// Waits for one op without blocking the thread; resolves to how late
    /// it starts.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses no tokens (see [`AcquireFuture`]).
    pub fn acquire_async(&self) -> AcquireFuture<'_> {
        self.acquire_n_async(1)
    }

    /// Waits for an op of weight `n` without blocking the thread.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio_test_runtime();
    /// # fn tokio_test_runtime() {
    /// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let limiter = tollgate::RateLimiter::new("1K".parse().unwrap());
    /// let late = limiter.acquire_n_async(1).await;
    /// assert!(late.as_secs() < 1);
    /// # });
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`RateLimiter::MAX_WEIGHT`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses no tokens (see [`AcquireFuture`]).
    pub fn acquire_n_async(&self, n: u64) -> AcquireFuture<'_> {
        AcquireFuture::new(&self.core, tokens(n))
    }

    /// Applies a spec live: `configure` sets rate and burst ratio without
    /// starting, `start` (the default) also starts an idle limiter, and
    /// `restart` clears the pools and the backlog as if new. Applying the
    /// same rate and ratio again is a no-op. A rate change keeps the backlog
    /// as time and clamps the active pool to the new size; what the pool
    /// held beyond it is dropped, not added to the backlog (ops in the pool
    /// may start now, they are not late).
    ///
    /// # Examples
    ///
    /// A limiter started at its smallest rate while it waits for its real
    /// one: the op it may pass at once is 1000 s of schedule at 0.001 ops/s,
    /// none of it owed at the new rate.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter, RateSpec};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = RateLimiter::builder(RateSpec::new(RateSpec::MIN_OPS_PER_SEC)?)
    ///     .clock(clock.clone())
    ///     .filler_thread(false)
    ///     .build();
    /// clock.advance(Duration::from_secs(1));
    /// limiter.apply(RateSpec::new(500.0)?);
    /// assert_eq!(limiter.backlog(), Duration::ZERO);
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    pub fn apply(&self, spec: RateSpec) {
        self.core.apply(spec);
    }

    /// The spec in force.
    pub fn spec(&self) -> RateSpec {
        self.core.spec()
    }

    /// The backlog as of the last fill, without reading the clock: what
    /// [`acquire`](RateLimiter::acquire) returns, for a caller that took
    /// its op with [`try_acquire`](RateLimiter::try_acquire). One relaxed
    /// load; [`backlog`](RateLimiter::backlog) brings it up to date first.
    #[inline]
    pub fn lateness(&self) -> Duration {
        self.core.lateness()
    }

    /// Brings the pool up to date with the clock and returns the backlog:
    /// the waiting pool, i.e. how late an op admitted now starts.
    pub fn backlog(&self) -> Duration {
        self.core.backlog()
    }

    /// Sets or removes the cap on the backlog (see [`RateLimiterBuilder::max_backlog`]).
    pub fn set_max_backlog(&self, cap: Option<Duration>) {
        self.core.set_max_backlog(cap);
    }

    /// The cap on the backlog, if any.
    pub fn max_backlog(&self) -> Option<Duration> {
        self.core.max_backlog()
    }

    /// Ops admitted, cumulative wait and the current backlog.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// Exact token accounting, for tests and model checks.
    #[doc(hidden)]
    pub fn ledger(&self) -> Ledger {
        self.core.ledger()
    }
}

impl Drop for RateLimiter {
    fn drop(&mut self) {
        self.core.filler_signal().stop();
        if let Some(handle) = self.filler.take() {
            let _ = handle.join();
        }
    }
}
