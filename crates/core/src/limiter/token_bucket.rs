//! A lazily filled token bucket that answers "may I, and how long must I
//! wait?" without blocking: [`TokenBucket::reserve`].
//!
//! # Implementation notes
//!
//! The bucket keeps a signed *level* in the limiter's fixed-point tokens
//! (`2^20` per op, see `units.rs`): positive is tokens on hand, negative is
//! debt, tokens already promised to callers who were told to wait. There is
//! no filler thread: every call first brings the level up to date with the
//! clock, adding `Meter::tokens_for(now - last)` and carrying the remainder,
//! so a bucket polled at any period earns exactly `rate * elapsed` (a 10/s
//! bucket polled every 99 ms earns 0.99 ops per poll, not 0). A full bucket
//! drops what does not fit, fraction included, as the active pool of the
//! limiter does at its capacity.
//!
//! A reservation of `n` ops subtracts `n << 20` from the level, as the
//! quotaservice design's algorithm does: what is on hand is granted and
//! what is lacking becomes debt that *later* callers pay. The caller's own
//! wait is the debt that existed before it (zero when the level is not
//! negative): the exact time for that debt to be earned back, the least `t`
//! with `tokens_for(t, carry) >= debt`. A reservation is refused, leaving
//! the level as it was, when that wait exceeds the caller's max wait, or
//! when the debt it would leave behind would take longer than the max debt
//! to earn back: a refused caller claims nothing.
//!
//! One small mutex guards the state. The critical section is a few integer
//! operations (about 30-60 ns uncontended); a bucket is typically reached
//! through an RPC costing tens of microseconds, and thousands of buckets cost
//! memory only, never threads. The clock is read under the lock so that the
//! level's timestamps never go backwards.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

use super::spec::RateSpec;
use super::units::{Meter, MAX_OPS_PER_ACQUIRE, TOKEN_SHIFT};
use crate::clock::{Clock, SystemClock};
use crate::sync::{lock, Mutex};

/// The shape of a [`TokenBucket`]: its fill rate, size, max debt and
/// default max wait.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{BucketSettings, RateSpec};
///
/// let settings = BucketSettings::new(RateSpec::new(0.5)?) // one op every 2 s
///     .size(3)
///     .max_debt(Duration::from_secs(10))
///     .max_wait(Duration::from_secs(4));
/// assert_eq!(settings.size_ops(), 3);
/// # Ok::<(), tollgate::SpecError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketSettings {
    rate: RateSpec,
    size: u64,
    max_debt: Duration,
    max_wait: Duration,
}

impl BucketSettings {
    /// A bucket filled at `rate` (its burst ratio and verb are ignored),
    /// holding one second of tokens (at least one op), with a max debt and
    /// max wait of 10 s.
    pub fn new(rate: RateSpec) -> BucketSettings {
        let per_sec = rate.nano_ops_per_sec() / 1_000_000_000;
        BucketSettings {
            rate,
            size: u64::try_from(per_sec).unwrap_or(u64::MAX).max(1),
            max_debt: Duration::from_secs(10),
            max_wait: Duration::from_secs(10),
        }
    }

    /// How many ops the bucket holds when full (its burst). Clamped to
    /// [`TokenBucket::MAX_OPS`].
    #[must_use]
    pub fn size(self, ops: u64) -> BucketSettings {
        BucketSettings {
            size: ops.min(MAX_OPS_PER_ACQUIRE),
            ..self
        }
    }

    /// How far into the future a reservation may claim tokens: a
    /// reservation that would leave a debt taking longer than this to earn
    /// back is refused.
    #[must_use]
    pub fn max_debt(self, max_debt: Duration) -> BucketSettings {
        BucketSettings { max_debt, ..self }
    }

    /// The longest wait [`TokenBucket::reserve`] accepts; callers may lower
    /// it per reservation with [`TokenBucket::reserve_within`], never raise
    /// it.
    #[must_use]
    pub fn max_wait(self, max_wait: Duration) -> BucketSettings {
        BucketSettings { max_wait, ..self }
    }

    /// The fill rate.
    pub fn rate(&self) -> RateSpec {
        self.rate
    }

    /// The size in ops.
    pub fn size_ops(&self) -> u64 {
        self.size
    }

    /// The max debt.
    pub fn max_debt_duration(&self) -> Duration {
        self.max_debt
    }

    /// The default max wait.
    pub fn max_wait_duration(&self) -> Duration {
        self.max_wait
    }
}

/// Why a reservation was refused; nothing was claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The debt the reservation would leave would take longer than the
    /// bucket's max debt to earn back.
    MaxDebt,
    /// The wait would exceed the max wait (the bucket's, or the lower one
    /// the caller asked for).
    MaxWait,
    /// More ops than [`TokenBucket::MAX_OPS`] in one reservation.
    TooLarge,
}

/// The error of [`TokenBucket::reserve`]: the reservation was refused and
/// nothing was claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveError {
    refusal: Refusal,
    wait: Duration,
    limit: Duration,
}

impl ReserveError {
    /// Why it was refused.
    pub fn refusal(&self) -> Refusal {
        self.refusal
    }

    /// For [`Refusal::MaxWait`], the wait the caller would have had; for
    /// [`Refusal::MaxDebt`], the time the debt it would have left takes to
    /// earn back; zero for [`Refusal::TooLarge`].
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The limit it ran into (zero for [`Refusal::TooLarge`]).
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.refusal {
            Refusal::MaxDebt => write!(
                f,
                "token bucket: a debt of {:?} exceeds the max debt of {:?}",
                self.wait, self.limit
            ),
            Refusal::MaxWait => write!(
                f,
                "token bucket: a wait of {:?} exceeds the max wait of {:?}",
                self.wait, self.limit
            ),
            Refusal::TooLarge => write!(
                f,
                "token bucket: more than {MAX_OPS_PER_ACQUIRE} ops in one reservation"
            ),
        }
    }
}

impl std::error::Error for ReserveError {}

/// The mutable part of a bucket, guarded by its mutex.
#[derive(Debug)]
struct State {
    settings: BucketSettings,
    meter: Meter,
    /// The size in tokens.
    size: i128,
    /// Tokens on hand (> 0) or owed (< 0); never above `size`.
    level: i128,
    /// The meter's remainder below one token, `< den`.
    carry: u128,
    /// The clock reading the level is up to date with.
    last_ns: u64,
    /// The clock reading of the last reservation, granted or not.
    used_ns: u64,
}

impl State {
    fn new(settings: BucketSettings, now: u64) -> State {
        let size = i128::from(settings.size) << TOKEN_SHIFT;
        State {
            settings,
            meter: Meter::new(settings.rate.nano_ops_per_sec()),
            size,
            level: size,
            carry: 0,
            last_ns: now,
            used_ns: now,
        }
    }

    /// Adds the tokens earned since `last_ns`, up to the size.
    fn refill(&mut self, now: u64) {
        if now <= self.last_ns {
            return; // no time passed, or the clock went back: nothing earned
        }
        let fresh = self.meter.tokens_for(now - self.last_ns, &mut self.carry);
        self.last_ns = now;
        let fresh = i128::try_from(fresh).unwrap_or(i128::MAX);
        let level = self.level.saturating_add(fresh);
        if level >= self.size {
            // Full: what does not fit is dropped, the fraction with it.
            self.level = self.size;
            self.carry = 0;
        } else {
            self.level = level;
        }
    }

    /// Whether `debt` tokens are earned back within `within` from now:
    /// `nanos_until(debt) <= within`, in one step of the meter.
    fn earns_within(&self, debt: u128, within: Duration) -> bool {
        let ns = u64::try_from(within.as_nanos()).unwrap_or(u64::MAX);
        self.meter.tokens_for(ns, &mut self.carry.clone()) >= debt
    }

    /// Nanoseconds until `debt` tokens are earned from now: the least `t`
    /// with `tokens_for(t, carry) >= debt`.
    fn nanos_until(&self, debt: u128) -> u64 {
        let enough = |t: u64| self.meter.tokens_for(t, &mut self.carry.clone()) >= debt;
        // `nanos_for(debt) + 1` always earns the debt; the carry (under one
        // token) may make up to one token's time less enough. Binary search
        // that range: at most about 20 steps, at 0.001 ops/s.
        let hi = self.meter.nanos_for(debt).saturating_add(1);
        let mut lo = hi.saturating_sub(self.meter.nanos_for(1).saturating_add(2));
        let mut hi = hi;
        if !enough(hi) {
            return hi; // saturated: beyond any cap
        }
        // Invariant: enough(hi); lo == 0 or !enough(lo).
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if enough(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        hi
    }
}

/// A token bucket without a filler thread that grants a reservation now and
/// says how long to wait before using it, going into debt up to a cap.
///
/// The debt rule is quotaservice's (and Guava's `RateLimiter`'s): a
/// reservation takes what is on hand and borrows the rest, and the *next*
/// caller waits for that debt to be earned back. A caller's wait is the
/// debt owed before it, so the reservation that empties the bucket, or
/// borrows, waits for nothing. A reservation is refused, and claims
/// nothing, when its wait exceeds the max wait or the debt it would leave
/// exceeds the max debt.
///
/// Built on the limiter's exact fixed-point tokens: rates below one per
/// second and fractional refills are exact, and a bucket polled more often
/// than its interval still earns its full rate. A new bucket starts full.
///
/// `TokenBucket` is `Send + Sync` and cheap to keep by the thousand: it owns
/// no thread, only a small mutex-guarded state and a shared clock.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{BucketSettings, ManualClock, RateSpec, Refusal, TokenBucket};
///
/// let clock = ManualClock::new();
/// let settings = BucketSettings::new(RateSpec::new(10.0)?) // one op per 100 ms
///     .size(2)
///     .max_debt(Duration::from_millis(250));
/// let bucket = TokenBucket::with_clock(settings, Arc::new(clock.clone()));
///
/// assert_eq!(bucket.reserve(2), Ok(Duration::ZERO)); // the bucket starts full
/// // Nothing on hand: borrowed, and the next caller pays.
/// assert_eq!(bucket.reserve(1), Ok(Duration::ZERO));
/// assert_eq!(bucket.reserve(1), Ok(Duration::from_millis(100)));
/// // 200 ms owed; one more op would leave 300 ms > the 250 ms cap.
/// let refused = bucket.reserve(1).unwrap_err();
/// assert_eq!(refused.refusal(), Refusal::MaxDebt);
/// clock.advance(Duration::from_millis(150));
/// assert_eq!(bucket.reserve(1), Ok(Duration::from_millis(50)));
/// # Ok::<(), tollgate::SpecError>(())
/// ```
pub struct TokenBucket {
    clock: StdArc<dyn Clock>,
    state: Mutex<State>,
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("TokenBucket")
            .field("settings", &state.settings)
            .field(
                "level_ops",
                &(state.level as f64 / (1u64 << TOKEN_SHIFT) as f64),
            )
            .finish()
    }
}

impl TokenBucket {
    /// The most ops one reservation may ask for (about 8.8e12).
    pub const MAX_OPS: u64 = MAX_OPS_PER_ACQUIRE;

    /// A full bucket on the system clock.
    pub fn new(settings: BucketSettings) -> TokenBucket {
        TokenBucket::with_clock(settings, StdArc::new(SystemClock::new()))
    }

    /// A full bucket on `clock`, which many buckets may share.
    pub fn with_clock(settings: BucketSettings, clock: StdArc<dyn Clock>) -> TokenBucket {
        let now = clock.now_ns();
        TokenBucket {
            clock,
            state: Mutex::new(State::new(settings, now)),
        }
    }

    /// Reserves `ops` ops, waiting at most the bucket's max wait; returns
    /// how long to wait before using them: the debt owed before this
    /// reservation (zero when none is). Zero ops are always granted at once.
    ///
    /// # Errors
    ///
    /// A [`ReserveError`] when the wait would exceed the max wait, the debt
    /// left would exceed the max debt, or `ops` exceeds
    /// [`TokenBucket::MAX_OPS`]; nothing is claimed.
    pub fn reserve(&self, ops: u64) -> Result<Duration, ReserveError> {
        self.reserve_inner(ops, None)
    }

    /// Like [`reserve`](TokenBucket::reserve), with a max wait of
    /// `max_wait` if that is lower than the bucket's: a caller may lower the
    /// max wait, never raise it. `Duration::ZERO` means "only while nothing
    /// is owed".
    ///
    /// # Errors
    ///
    /// As [`reserve`](TokenBucket::reserve).
    pub fn reserve_within(&self, ops: u64, max_wait: Duration) -> Result<Duration, ReserveError> {
        self.reserve_inner(ops, Some(max_wait))
    }

    fn reserve_inner(
        &self,
        ops: u64,
        max_wait: Option<Duration>,
    ) -> Result<Duration, ReserveError> {
        if ops > MAX_OPS_PER_ACQUIRE {
            return Err(ReserveError {
                refusal: Refusal::TooLarge,
                wait: Duration::ZERO,
                limit: Duration::ZERO,
            });
        }
        if ops == 0 {
            return Ok(Duration::ZERO);
        }
        let need = i128::from(ops) << TOKEN_SHIFT;
        let mut state = lock(&self.state);
        let now = self.clock.now_ns();
        state.refill(now);
        state.used_ns = state.used_ns.max(now);
        // The caller waits for the debt owed before it, not for its own
        // tokens: those are owed by whoever comes next.
        let wait = if state.level >= 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(state.nanos_until(state.level.unsigned_abs()))
        };
        let max_wait = max_wait.map_or(state.settings.max_wait, |w| w.min(state.settings.max_wait));
        if wait > max_wait {
            return Err(ReserveError {
                refusal: Refusal::MaxWait,
                wait,
                limit: max_wait,
            });
        }
        // after >= -(size + need) > -2^64 << 20: the negation fits.
        let after = state.level - need;
        let max_debt = state.settings.max_debt;
        if after < 0 && !state.earns_within(after.unsigned_abs(), max_debt) {
            return Err(ReserveError {
                refusal: Refusal::MaxDebt,
                wait: Duration::from_nanos(state.nanos_until(after.unsigned_abs())),
                limit: max_debt,
            });
        }
        state.level = after;
        Ok(wait)
    }

    /// Ops on hand now (negative: owed), rounded down to whole ops.
    pub fn available(&self) -> i64 {
        let mut state = lock(&self.state);
        let now = self.clock.now_ns();
        state.refill(now);
        let ops = state.level >> TOKEN_SHIFT;
        i64::try_from(ops).unwrap_or(if ops < 0 { i64::MIN } else { i64::MAX })
    }

    /// How long since the last reservation (or since the bucket was made).
    pub fn idle(&self) -> Duration {
        let used = lock(&self.state).used_ns;
        Duration::from_nanos(self.clock.now_ns().saturating_sub(used))
    }

    /// The settings in force.
    pub fn settings(&self) -> BucketSettings {
        lock(&self.state).settings
    }

    /// Applies new settings and keeps the bucket's state: tokens on hand
    /// (down to the new size) and debt carry over, so a reload does not
    /// refill or forgive anyone. Time up to now is earned at the old rate.
    pub fn set_settings(&self, settings: BucketSettings) {
        let mut state = lock(&self.state);
        let now = self.clock.now_ns();
        state.refill(now);
        if state.settings == settings {
            return;
        }
        state.settings = settings;
        state.size = i128::from(settings.size) << TOKEN_SHIFT;
        state.level = state.level.min(state.size);
        let meter = Meter::new(settings.rate.nano_ops_per_sec());
        if meter != state.meter {
            // The carry is in the old meter's units: under one token, dropped.
            state.meter = meter;
            state.carry = 0;
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn bucket(rate: f64, size: u64, max_debt_ms: u64) -> (TokenBucket, ManualClock) {
        let clock = ManualClock::new();
        let settings = BucketSettings::new(RateSpec::new(rate).unwrap())
            .size(size)
            .max_debt(Duration::from_millis(max_debt_ms))
            .max_wait(Duration::from_secs(3600));
        (
            TokenBucket::with_clock(settings, StdArc::new(clock.clone())),
            clock,
        )
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn polling_every_99_ms_earns_the_full_rate() {
        // The reference's floor(dt / interval) with tokensNextAvailable = now
        // earns 0 tokens per 99 ms poll; the exact meter earns 0.99.
        let (b, clock) = bucket(10.0, 10, 10_000);
        let mut granted = 0u64;
        for poll in 0..=1010u64 {
            if poll > 0 {
                clock.advance(99 * MS);
            }
            if b.reserve_within(1, Duration::ZERO).is_ok() {
                granted += 1;
            }
        }
        // 10 on hand at the start plus 1010 polls * 0.99 ops = 1009.9 ops
        // over 99.99 s, and a poll is granted while nothing is owed: every
        // poll but the one that finds 0.01 ops owed, 10/s.
        assert_eq!(granted, 1010);
        assert_eq!(b.available(), -1); // -0.1 rounds down
    }

    #[test]
    fn rates_below_one_per_second_are_exact() {
        let (b, clock) = bucket(0.3, 1, 100_000);
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        assert_eq!(b.reserve(1), Ok(Duration::ZERO)); // borrowed
                                                      // One op owed at one op per 3.333... s: the wait rounds up to the
                                                      // nanosecond.
        assert_eq!(b.reserve(1), Ok(Duration::from_nanos(3_333_333_334)));
        clock.advance(Duration::from_nanos(3_333_333_333));
        assert_eq!(b.available(), -2);
        clock.advance(Duration::from_nanos(1));
        assert_eq!(b.available(), -1);
        // Over 1000 s, 300 ops exactly, plus 2 on hand at the start.
        // Size 2 so the bucket never fills (a full bucket drops time).
        let (b, clock) = bucket(0.3, 2, 0);
        let mut granted = 0;
        for _ in 0..=100_000 {
            if b.reserve(1).is_ok() {
                granted += 1;
            }
            clock.advance(10 * MS);
        }
        assert_eq!(granted, 302);
    }

    #[test]
    fn debt_is_paid_back_exactly_and_capped() {
        let (b, clock) = bucket(10.0, 5, 1_000);
        assert_eq!(b.reserve(5), Ok(Duration::ZERO));
        // Ten more ops: one second of debt, exactly the cap, which the
        // next caller pays.
        assert_eq!(b.reserve(10), Ok(Duration::ZERO));
        assert_eq!(b.available(), -10);
        // One more would leave 1.1 s owed: refused, nothing claimed.
        let err = b.reserve(1).unwrap_err();
        assert_eq!(err.refusal(), Refusal::MaxDebt);
        assert_eq!(err.wait(), 1100 * MS);
        assert_eq!(err.limit(), Duration::from_secs(1));
        assert_eq!(
            err.to_string(),
            "token bucket: a debt of 1.1s exceeds the max debt of 1s"
        );
        assert_eq!(b.available(), -10);
        clock.advance(250 * MS);
        assert_eq!(b.available(), -8); // -7.5 rounds down
        assert_eq!(b.reserve(1), Ok(750 * MS));
        clock.advance(Duration::from_secs(10));
        assert_eq!(b.available(), 5); // full again, not 5 + the surplus
    }

    #[test]
    fn a_carried_fraction_shortens_the_wait_exactly() {
        let (b, clock) = bucket(10.0, 1, 10_000);
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        // 60 ms earn 0.6 ops, 629145.6 tokens: the fraction is carried.
        clock.advance(60 * MS);
        assert_eq!(b.reserve(1), Ok(40 * MS));
        assert_eq!(b.reserve(1), Ok(140 * MS));
        let (b, clock) = bucket(0.001, 1, u64::MAX / 2_000_000);
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        clock.advance(Duration::from_nanos(123_456_789_123));
        assert_eq!(b.reserve(1), Ok(Duration::from_nanos(876_543_210_877)));
    }

    #[test]
    fn a_refused_reservation_claims_nothing_even_when_large() {
        let (b, _clock) = bucket(10.0, 5, 1_000);
        assert_eq!(b.reserve(16).unwrap_err().refusal(), Refusal::MaxDebt);
        assert_eq!(b.available(), 5);
        let err = b.reserve(u64::MAX).unwrap_err();
        assert_eq!(err.refusal(), Refusal::TooLarge);
        assert_eq!(
            err.to_string(),
            format!(
                "token bucket: more than {} ops in one reservation",
                TokenBucket::MAX_OPS
            )
        );
        assert_eq!(
            b.reserve(TokenBucket::MAX_OPS).unwrap_err().refusal(),
            Refusal::MaxDebt
        );
        assert_eq!(b.available(), 5);
    }

    #[test]
    fn a_caller_max_wait_lowers_never_raises() {
        let clock = ManualClock::new();
        let settings = BucketSettings::new(RateSpec::new(10.0).unwrap())
            .size(1)
            .max_debt(Duration::from_secs(10))
            .max_wait(300 * MS);
        let b = TokenBucket::with_clock(settings, StdArc::new(clock.clone()));
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        assert_eq!(b.reserve(1), Ok(Duration::ZERO)); // 100 ms owed
                                                      // Lowered: 100 ms > 50 ms.
        let err = b.reserve_within(1, 50 * MS).unwrap_err();
        assert_eq!((err.refusal(), err.limit()), (Refusal::MaxWait, 50 * MS));
        // Raising to 1 s keeps the bucket's 300 ms.
        assert_eq!(b.reserve_within(3, Duration::from_secs(1)), Ok(100 * MS));
        let err = b.reserve_within(1, Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            (err.refusal(), err.wait(), err.limit()),
            (Refusal::MaxWait, 400 * MS, 300 * MS)
        );
        assert_eq!(
            err.to_string(),
            "token bucket: a wait of 400ms exceeds the max wait of 300ms"
        );
        assert_eq!(b.reserve(1).unwrap_err().refusal(), Refusal::MaxWait);
        assert_eq!(b.reserve_within(0, Duration::ZERO), Ok(Duration::ZERO));
    }

    #[test]
    fn new_settings_keep_the_level() {
        let (b, clock) = bucket(10.0, 10, 10_000);
        assert_eq!(b.reserve(4), Ok(Duration::ZERO));
        b.set_settings(b.settings().size(3));
        assert_eq!(b.available(), 3);
        assert_eq!(b.reserve(5), Ok(Duration::ZERO));
        b.set_settings(
            BucketSettings::new(RateSpec::new(20.0).unwrap())
                .size(3)
                .max_debt(Duration::from_secs(10)),
        );
        assert_eq!(b.available(), -2);
        clock.advance(100 * MS);
        assert_eq!(b.available(), 0);
    }

    #[test]
    fn a_clock_going_back_earns_nothing() {
        let (b, clock) = bucket(1.0, 1, 10_000);
        clock.set_ns(5_000_000_000);
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        clock.set_ns(1_000_000_000);
        assert_eq!(b.available(), 0);
        assert_eq!(b.reserve(1), Ok(Duration::ZERO));
        clock.set_ns(6_000_000_000);
        assert_eq!(b.available(), 0);
        assert_eq!(b.idle(), Duration::from_secs(1));
    }

    #[test]
    fn shared_between_threads_grants_exactly_the_tokens_on_hand() {
        let (b, _clock) = bucket(1.0, 1000, 0);
        let b = StdArc::new(b);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let b = StdArc::clone(&b);
                std::thread::spawn(move || (0..500).filter(|_| b.reserve(1).is_ok()).count())
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 1000);
    }
}
