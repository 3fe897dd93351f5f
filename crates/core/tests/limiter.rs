//! The limiter's semantics on a manual clock: exact numbers, no timing.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Clock, ManualClock, RateLimiter, RateSpec};

const MS: Duration = Duration::from_millis(1);

fn manual(spec: &str) -> (RateLimiter, ManualClock) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(spec.parse().unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .build();
    (limiter, clock)
}

/// Takes every whole op the limiter admits now; returns how many.
fn drain(limiter: &RateLimiter) -> u64 {
    let mut n = 0;
    while limiter.try_acquire() {
        n += 1;
    }
    n
}

/// `filled - dropped == admitted + active + waiting + in_flight`, in tokens.
fn assert_conserved(limiter: &RateLimiter, admitted_ops: u64) {
    let l = limiter.ledger();
    let admitted = u128::from(admitted_ops) * u128::from(l.tokens_per_op);
    assert_eq!(
        l.filled - l.dropped,
        admitted + l.active + l.waiting + l.in_flight,
        "{l:?}, admitted {admitted_ops} ops"
    );
}

#[test]
fn the_first_op_passes_at_once_and_the_next_waits_for_time() {
    let (limiter, clock) = manual("100");
    assert!(limiter.try_acquire());
    assert!(!limiter.try_acquire());
    clock.advance(Duration::from_millis(9));
    limiter.backlog();
    assert!(!limiter.try_acquire(), "9 ms is less than one op at 100/s");
    clock.advance(MS);
    limiter.backlog();
    assert!(limiter.try_acquire());
    assert_eq!(limiter.stats().admitted, 2);
    assert_conserved(&limiter, 2);
}

#[test]
fn golden_vector_through_the_limiter() {
    // 1e7 ops/s, burst 1.1: A = 1 ms, B = 0.1 ms.
    let (limiter, clock) = manual("10M,1.1");
    assert!(limiter.try_acquire()); // the start allowance, so the pool is empty
    clock.advance(MS);
    assert_eq!(limiter.backlog(), Duration::ZERO);
    clock.advance(Duration::from_nanos(100));
    assert_eq!(
        limiter.backlog(),
        Duration::from_nanos(90),
        "10 ns moved into burst"
    );
    clock.advance(Duration::from_nanos(10));
    assert_eq!(limiter.backlog(), Duration::from_nanos(99));
    assert_conserved(&limiter, 1);
}

#[test]
fn three_hundred_million_per_second_is_exact() {
    // Whole-nanosecond op costs would make this 333M/s.
    let (limiter, clock) = manual("300M");
    for _ in 0..1000 {
        clock.advance(MS);
        limiter.backlog();
    }
    let l = limiter.ledger();
    assert_eq!(
        l.filled,
        u128::from(300_000_001u64) * u128::from(l.tokens_per_op)
    );
}

#[test]
fn rates_from_a_thousandth_to_a_trillion_fill_exactly() {
    for (spec, seconds, ops) in [
        ("0.001", 3000u64, 3u64),
        ("7", 3, 21),
        ("1T", 1, 1_000_000_000_000),
    ] {
        let (limiter, clock) = manual(spec);
        for _ in 0..seconds {
            clock.advance(Duration::from_secs(1));
            limiter.backlog();
        }
        let l = limiter.ledger();
        assert_eq!(
            l.filled,
            u128::from(ops + 1) * u128::from(l.tokens_per_op),
            "{spec}"
        );
    }
}

/// Spec §3: at 1000 ops/s with a 1 s backlog and an infinitely fast
/// client, the next second admits 1000 ops at ratio 1.0, 1100 at 1.1 and
/// 1500 at 1.5.
#[test]
fn catch_up_runs_at_rate_times_burst_ratio() {
    for (ratio, expected) in [("1.0", 1000), ("1.1", 1100), ("1.5", 1500)] {
        let (limiter, clock) = manual(&format!("1000,{ratio}"));
        drain(&limiter);
        clock.advance(Duration::from_secs(1));
        limiter.backlog();
        drain(&limiter);
        let mut admitted = 0;
        for _ in 0..1000 {
            clock.advance(MS);
            limiter.backlog();
            admitted += drain(&limiter);
        }
        assert_eq!(admitted, expected, "ratio {ratio}");
    }
}

#[test]
fn strict_ratio_keeps_the_backlog() {
    let (limiter, clock) = manual("1000,1.0");
    drain(&limiter);
    clock.advance(Duration::from_secs(1));
    let before = limiter.backlog();
    assert_eq!(drain(&limiter), 2, "A = 2 ops");
    for _ in 0..100 {
        clock.advance(MS);
        limiter.backlog();
        drain(&limiter);
    }
    assert_eq!(limiter.backlog(), before);
    assert_eq!(
        before,
        Duration::from_millis(998),
        "A = 2 ms of the second went to the pool"
    );
}

#[test]
fn a_rate_change_keeps_the_backlog_as_time_and_clamps_the_pool() {
    let (limiter, clock) = manual("1000,1.5");
    drain(&limiter);
    clock.advance(Duration::from_secs(1));
    // A = 2 ops, B = 1 op: P = 3 ops, W = 997 ops = 997 ms.
    assert_eq!(limiter.backlog(), Duration::from_millis(997));
    limiter.apply("2000,1.5".parse().unwrap());
    // P = 3 ms = 6 ops at 2000/s; the new A + B = 1.5 ms = 3 ops: the other
    // 1.5 ms is dropped (ops in the pool were not late), the backlog keeps
    // its 997 ms.
    assert_eq!(limiter.backlog(), Duration::from_millis(997));
    assert_eq!(
        limiter.ledger().dropped,
        3 * u128::from(limiter.ledger().tokens_per_op)
    );
    assert_eq!(drain(&limiter), 3);
    assert_eq!(limiter.spec().to_string(), "2K,1.5");
    assert_conserved(&limiter, 4);
}

#[test]
fn a_limiter_started_at_the_smallest_rate_owes_nothing_at_its_real_one() {
    // How a lease-fed limiter starts: at 0.001 ops/s, where the op it may
    // pass at once stands for 1000 s, until its lease comes.
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(RateSpec::new(RateSpec::MIN_OPS_PER_SEC).unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .build();
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.backlog(), Duration::ZERO);
    limiter.apply(RateSpec::new(500.0).unwrap());
    assert_eq!(limiter.backlog(), Duration::ZERO, "no schedule is owed");
    // A + B = 4 ms x 1.1 = 2.2 ops at 500/s: two whole ops now, on time.
    assert_eq!(drain(&limiter), 2);
    assert_eq!(limiter.lateness(), Duration::ZERO);
    // The steady state: one op every 2 ms, each on time.
    for _ in 0..1000 {
        clock.advance(2 * MS);
        assert_eq!(limiter.backlog(), Duration::ZERO);
        assert!(limiter.try_acquire());
        assert!(!limiter.try_acquire());
    }
    let stats = limiter.stats();
    assert_eq!(stats.admitted, 1002);
    assert_eq!(stats.total_wait, Duration::ZERO);
    assert_conserved(&limiter, 1002);
}

#[test]
fn applying_the_same_schedule_is_a_no_op() {
    let (limiter, clock) = manual("1000,1.5");
    clock.advance(Duration::from_millis(500));
    limiter.backlog();
    let before = limiter.ledger();
    limiter.apply("1K:1.5:start".parse().unwrap());
    assert_eq!(limiter.ledger(), before);
}

#[test]
fn restart_clears_pools_and_backlog() {
    let (limiter, clock) = manual("1000");
    drain(&limiter);
    clock.advance(Duration::from_secs(2));
    assert!(limiter.backlog() > Duration::from_secs(1));
    limiter.apply("1000,1.1,restart".parse().unwrap());
    assert_eq!(limiter.backlog(), Duration::ZERO);
    assert_eq!(drain(&limiter), 1, "only the start allowance");
}

#[test]
fn configure_does_not_start_and_start_does() {
    let (limiter, clock) = manual("1000,1.1,configure");
    assert!(!limiter.try_acquire());
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        limiter.backlog(),
        Duration::ZERO,
        "an idle limiter accrues nothing"
    );
    assert!(!limiter.try_acquire());
    limiter.apply("1000".parse().unwrap());
    assert!(limiter.try_acquire());
    assert!(!limiter.try_acquire());
}

#[test]
fn the_backlog_cap_drops_old_time() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1000".parse().unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .max_backlog(Duration::from_millis(100))
        .build();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(limiter.backlog(), Duration::from_millis(100));
    limiter.set_max_backlog(None);
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.backlog(), Duration::from_millis(1100));
    assert_conserved(&limiter, 0);
}

#[test]
fn zero_weight_returns_at_once_even_when_idle() {
    let (limiter, _clock) = manual("1,1.0,configure");
    assert_eq!(limiter.acquire_n(0), Duration::ZERO);
    assert!(limiter.try_acquire_n(0));
}

#[test]
fn acquire_timeout_fails_fast_and_takes_nothing() {
    let (limiter, _clock) = manual("1,1.0");
    let before = limiter.ledger();
    let err = limiter
        .acquire_timeout(10, Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(err.max_wait(), Duration::from_secs(1));
    assert_eq!(err.to_string(), "rate limit: no capacity within 1s");
    assert_eq!(limiter.ledger(), before);
    assert_eq!(
        limiter.acquire_timeout(1, Duration::ZERO),
        Ok(Duration::ZERO)
    );
}

#[test]
fn a_weight_larger_than_the_pool_completes_at_the_average_rate() {
    // 100 ops/s: A = 2 ops. Ask for 50 ops at once.
    let (limiter, clock) = manual("100,1.0");
    let limiter = Arc::new(limiter);
    drain(&limiter);
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (limiter, done) = (Arc::clone(&limiter), Arc::clone(&done));
        std::thread::spawn(move || {
            limiter.acquire_n(50);
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut steps = 0u64;
    while !done.load(Ordering::SeqCst) {
        assert!(steps < 100_000, "the large acquire never completed");
        clock.advance(MS);
        limiter.backlog(); // fills and wakes the waiter
        steps += 1;
        std::thread::yield_now();
    }
    waiter.join().unwrap();
    assert!(
        steps >= 500,
        "50 ops at 100/s need 500 ms of schedule, got {steps} ms"
    );
    assert_conserved(&limiter, 51);
}

#[test]
fn a_dropped_async_acquire_returns_what_it_gathered() {
    let (limiter, clock) = manual("100,1.0");
    drain(&limiter);
    clock.advance(Duration::from_millis(15)); // 1.5 ops
    limiter.backlog();
    let before = limiter.ledger();
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut fut = std::pin::pin!(limiter.acquire_n_async(50));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
        assert!(
            limiter.ledger().in_flight > 0,
            "a large request gathers as it goes"
        );
    }
    let after = limiter.ledger();
    assert_eq!(after.in_flight, 0);
    assert_eq!(after.active, before.active);
    assert_conserved(&limiter, 1);
    // A small request that is pending takes nothing; dropping it is free.
    {
        let mut fut = std::pin::pin!(limiter.acquire_n_async(2));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    }
    assert_eq!(limiter.ledger(), after);
    // And an async acquire completes once time passes.
    clock.advance(Duration::from_millis(5));
    limiter.backlog();
    let mut fut = std::pin::pin!(limiter.acquire_n_async(2));
    assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(_)));
}

#[test]
fn concurrent_takers_neither_create_nor_lose_tokens() {
    let (limiter, clock) = manual("100K,1.5");
    let admitted = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for weight in 1..=4u64 {
            let (limiter, admitted, stop) = (&limiter, &admitted, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if limiter.try_acquire_n(weight) {
                        admitted.fetch_add(weight, Ordering::Relaxed);
                    }
                }
            });
        }
        for _ in 0..2000 {
            clock.advance(Duration::from_micros(100));
            limiter.backlog();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(limiter.stats().admitted, admitted);
    assert_conserved(&limiter, admitted);
    // 0.2 s at 100K/s plus the start allowance bounds what was admitted.
    assert!(admitted <= 20_001, "{admitted}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over random mixes of weighted takes, clock steps, cap and rate
    /// changes, tokens are conserved exactly, and at a fixed rate no more
    /// than `rate * t + 1` ops are admitted.
    #[test]
    fn conservation_over_random_op_mixes(
        rate in 1u64..5_000,
        ratio_pct in 100u64..300,
        steps in proptest::collection::vec((0u64..50_000_000, 0u64..8, 0u8..20), 1..80),
    ) {
        let spec = format!("{rate},{}.{:02}", ratio_pct / 100, ratio_pct % 100);
        let (limiter, clock) = manual(&spec);
        let mut admitted = 0u64;
        let mut elapsed_ns = 0u128;
        for (advance, weight, action) in steps {
            clock.advance(Duration::from_nanos(advance));
            elapsed_ns += u128::from(advance);
            match action {
                0 => { limiter.backlog(); }
                1 => limiter.set_max_backlog(Some(Duration::from_millis(advance % 1000))),
                _ => {
                    while limiter.try_acquire_n(weight) {
                        admitted += weight;
                        if weight == 0 { break; }
                    }
                }
            }
            assert_conserved(&limiter, admitted);
            let bound = u128::from(rate) * elapsed_ns / 1_000_000_000 + 1;
            prop_assert!(u128::from(admitted) <= bound, "admitted {} > {}", admitted, bound);
        }
        prop_assert_eq!(limiter.stats().admitted, admitted);
    }
}

#[test]
fn parse_errors_name_the_problem() {
    for (bad, needle) in [
        ("0", "out of range"),
        ("-5", "out of range"),
        ("NaN", "not a number"),
        ("inf", "not a number"),
        ("100,0.5", "below 1.0"),
        ("100,1.1,go", "unknown verb"),
        ("garbage", "not a number"),
        ("", "empty spec"),
    ] {
        let err = bad.parse::<RateSpec>().unwrap_err().to_string();
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
    assert!(RateSpec::new(f64::NAN).is_err());
    assert!(RateSpec::new(f64::INFINITY).is_err());
}

#[test]
fn thread_budgets_are_counted_and_given_back_when_threads_exit() {
    // 10M/s: A = 10K ops, so threads keep budgets of up to 64 ops.
    let (limiter, clock) = manual("10M,1.0");
    clock.advance(MS);
    limiter.backlog();
    let limiter = Arc::new(limiter);
    // Joined (not scoped) threads: `join` returns after the thread's
    // thread-locals are destroyed, which is when a budget goes back.
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || (0..1000).filter(|_| limiter.try_acquire()).count() as u64)
        })
        .collect();
    let admitted = AtomicU64::new(workers.into_iter().map(|w| w.join().unwrap()).sum());
    // The threads have exited and given their unused budgets back.
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(admitted, 3000);
    assert_eq!(limiter.stats().admitted, admitted);
    assert_conserved(&limiter, admitted);
    // A thread that moves to another limiter gives its budget back too.
    let (other, _) = manual("10M,1.0");
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(limiter.try_acquire());
            assert!(other.try_acquire());
            assert_eq!(limiter.stats().admitted, admitted + 1);
        });
    });
}

#[test]
fn the_active_pool_covers_one_and_a_half_fill_intervals() {
    // 1K ops/s with a 10 ms fill interval: A = 15 ops, not max(1 ms, 2 ops),
    // so a 10 ms fill reaches the pool whole instead of spilling.
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1K,1.0".parse().unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .fill_interval(10 * MS)
        .build();
    assert_eq!(drain(&limiter), 1);
    clock.advance(10 * MS);
    assert_eq!(limiter.backlog(), Duration::ZERO);
    assert_eq!(drain(&limiter), 10);
    clock.advance(15 * MS);
    assert_eq!(limiter.backlog(), Duration::ZERO);
    assert_eq!(drain(&limiter), 15);
    clock.advance(16 * MS);
    assert_eq!(limiter.backlog(), MS, "beyond 1.5 intervals time spills");
    assert_eq!(drain(&limiter), 15);
    assert_conserved(&limiter, 41);
    // The default interval keeps the spec's sizes (golden vectors).
    let (limiter, clock) = manual("1K,1.0");
    assert_eq!(drain(&limiter), 1);
    clock.advance(10 * MS);
    assert_eq!(limiter.backlog(), 8 * MS);
    assert_eq!(drain(&limiter), 2);
}

/// A manual clock that says it moves in steps of 10 ms.
#[derive(Debug, Clone)]
struct SteppedClock(ManualClock);

impl Clock for SteppedClock {
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    fn resolution_ns(&self) -> u64 {
        10_000_000
    }
}

#[test]
fn a_clock_with_a_coarse_step_fills_as_if_that_were_the_interval() {
    // The default 500 µs interval, but time comes in 10 ms steps: A = 15
    // ops, as with a 10 ms interval, so each step reaches the pool whole.
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1K,1.0".parse().unwrap())
        .clock(SteppedClock(clock.clone()))
        .filler_thread(false)
        .build();
    assert_eq!(drain(&limiter), 1);
    for _ in 0..3 {
        clock.advance(10 * MS);
        assert_eq!(limiter.backlog(), Duration::ZERO);
        assert_eq!(drain(&limiter), 10);
    }
    assert_conserved(&limiter, 31);
}

#[test]
fn a_blocked_thread_fills_by_itself_when_no_filler_runs() {
    // No filler thread and nobody calls `backlog()`: only the waiter at the
    // head of the queue can fill once its fill is due.
    let (limiter, clock) = manual("1K,1.0");
    assert_eq!(drain(&limiter), 1);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| limiter.acquire());
        // Let the waiter find the pool empty and park (a caller that came
        // after the advance would fill before queueing, which proves less;
        // either way the test must finish).
        std::thread::sleep(Duration::from_millis(20));
        clock.advance(MS);
        waiter.join().unwrap();
    });
    assert_conserved(&limiter, 2);
}

#[test]
fn blocked_threads_are_served_in_order_by_hand_off_and_nothing_is_lost() {
    // 1K ops/s: every waiter needs one op, and each fill of one op serves
    // exactly one waiter; budgets play no part (A = 2 ops).
    let (limiter, clock) = manual("1K,1.0");
    assert_eq!(drain(&limiter), 1);
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                limiter.acquire();
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let mut fills = 0;
        while done.load(Ordering::SeqCst) < 8 {
            assert!(fills < 100_000, "waiters were not served");
            clock.advance(MS);
            limiter.backlog();
            fills += 1;
            std::thread::yield_now();
        }
    });
    assert_conserved(&limiter, 9);
    assert_eq!(limiter.stats().admitted, 9);
}

#[test]
fn dropping_a_limiter_does_not_wait_for_a_long_fill_interval() {
    // With a one-hour interval the filler thread parks for an hour between
    // fills; drop must wake it. (Were it to wait, this test would hang.)
    let limiter = RateLimiter::builder("1K".parse().unwrap())
        .fill_interval(Duration::from_secs(3600))
        .build();
    assert!(limiter.try_acquire());
    std::thread::scope(|s| {
        // A waiter wakes the filler, which then sleeps for the interval.
        let waiter = s.spawn(|| limiter.acquire_timeout(1, 10 * MS));
        let _ = waiter.join().unwrap();
    });
    drop(limiter);
}

#[test]
fn an_interruptible_acquire_that_is_stopped_takes_nothing() {
    // The manual clock never moves: only `stop` can end the wait.
    let (limiter, _clock) = manual("1,1.0");
    let admitted = drain(&limiter);
    let before = limiter.ledger();
    let mut asked = 0;
    let got = limiter.acquire_n_interruptible(1, MS, || {
        asked += 1;
        asked == 3
    });
    assert_eq!(got, Err(tollgate::Interrupted));
    assert_eq!(asked, 3);
    assert_eq!(
        got.unwrap_err().to_string(),
        "rate limit: the wait was interrupted"
    );
    assert_eq!(limiter.ledger(), before);
    assert_conserved(&limiter, admitted);
}

#[test]
fn an_interruptible_acquire_keeps_its_place_and_completes() {
    // One op a millisecond on the system clock: `stop` never says stop,
    // so every acquire completes, in order, with its tokens.
    let limiter = RateLimiter::new("1K,1.0".parse().unwrap());
    let mut ok = 0;
    for _ in 0..20 {
        if limiter.acquire_n_interruptible(1, MS, || false).is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 20);
    assert!(limiter.stats().admitted >= 20);
}

#[test]
fn lateness_is_the_backlog_as_of_the_last_fill() {
    let (limiter, clock) = manual("1K,1.0");
    drain(&limiter);
    assert_eq!(limiter.lateness(), Duration::ZERO);
    // 10 ms pass and nobody takes them: beyond the active pool, the time
    // is backlog, which `backlog` brings up to date and `lateness` then reads.
    clock.advance(10 * MS);
    let backlog = limiter.backlog();
    assert!(backlog > Duration::ZERO);
    assert_eq!(limiter.lateness(), backlog);
}

/// Queued async acquires, each a task that takes one op and ends: every op
/// a fill brings goes to a queued task, none to the budget of the thread
/// that polled the first (no later acquire there would ever spend it).
#[test]
fn queued_one_shot_async_acquires_get_every_op_a_fill_brings() {
    let (limiter, clock) = manual("100K,1.0");
    drain(&limiter);
    let mut cx = Context::from_waker(Waker::noop());
    let mut futures: Vec<_> = (0..300)
        .map(|_| Box::pin(limiter.acquire_async()))
        .collect();
    for f in &mut futures {
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Pending);
    }
    // Two fills of 1 ms: 100 ops each, for the first 200 tasks in queue
    // order.
    let mut ready = vec![false; futures.len()];
    for _ in 0..2 {
        clock.advance(MS);
        limiter.backlog();
        for (f, r) in futures.iter_mut().zip(&mut ready) {
            if !*r {
                *r = f.as_mut().poll(&mut cx).is_ready();
            }
        }
    }
    let served = ready.iter().filter(|r| **r).count();
    assert_eq!(served, 200, "{ready:?}");
    assert!(ready[..200].iter().all(|r| *r), "served in queue order");
}

/// A waker that counts its wakes, for executors written out in a test.
struct CountWakes(AtomicU64);

impl std::task::Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountWakes>, Waker) {
    let count = Arc::new(CountWakes(AtomicU64::new(0)));
    (Arc::clone(&count), Waker::from(count))
}

/// A queued task served by a fill, acquiring in a loop: its next acquires
/// (in the same poll, from the same thread) take the rest of the fill at
/// once, without queueing again; the task queued behind it is woken once
/// to take what is left, finds nothing, and is served by the next fill.
#[test]
fn a_served_async_acquire_in_a_loop_spends_the_rest_of_the_fill_without_waiting() {
    let (limiter, clock) = manual("100K,1.0");
    let start = drain(&limiter);
    let (first_wakes, first_waker) = counting_waker();
    let (second_wakes, second_waker) = counting_waker();
    let mut first_cx = Context::from_waker(&first_waker);
    let mut second_cx = Context::from_waker(&second_waker);
    let mut first = Box::pin(limiter.acquire_async());
    let mut second = Box::pin(limiter.acquire_async());
    assert!(first.as_mut().poll(&mut first_cx).is_pending());
    assert!(second.as_mut().poll(&mut second_cx).is_pending());
    // 1 ms: 100 ops, all handed to the first task.
    clock.advance(MS);
    limiter.backlog();
    assert_eq!(first_wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(second_wakes.0.load(Ordering::SeqCst), 0);
    assert!(first.as_mut().poll(&mut first_cx).is_ready());
    assert_eq!(
        second_wakes.0.load(Ordering::SeqCst),
        1,
        "the task behind is woken to take what the first leaves"
    );
    for op in 1..100 {
        let mut next = Box::pin(limiter.acquire_async());
        assert!(
            next.as_mut().poll(&mut first_cx).is_ready(),
            "op {op} of the fill waits"
        );
    }
    assert_eq!(
        first_wakes.0.load(Ordering::SeqCst),
        1,
        "one wake-up, 100 ops"
    );
    assert!(second.as_mut().poll(&mut second_cx).is_pending());
    assert_eq!(limiter.stats().admitted, start + 100);
    clock.advance(MS);
    limiter.backlog();
    assert_eq!(second_wakes.0.load(Ordering::SeqCst), 2);
    assert!(second.as_mut().poll(&mut second_cx).is_ready());
    assert_conserved(&limiter, start + 101);
}

/// Acquires on `cx` until one waits: the ops taken, and the pending future.
fn spend_until_pending<'a>(
    limiter: &'a RateLimiter,
    cx: &mut Context<'_>,
) -> (u64, std::pin::Pin<Box<tollgate::AcquireFuture<'a>>>) {
    let mut ops = 0;
    loop {
        let mut next = Box::pin(limiter.acquire_async());
        if next.as_mut().poll(cx).is_pending() {
            return (ops, next);
        }
        ops += 1;
    }
}

/// Two tasks acquiring in a loop on one thread, each fill handed to one of
/// them: a task's first grant also wakes the task behind (it might have
/// taken one op and ended), but once a task comes back to wait after
/// spending its hand-off, its grants wake it alone: one wake-up per fill.
#[test]
fn a_looping_task_is_woken_alone_once_for_each_fill() {
    let (limiter, clock) = manual("100K,1.0");
    let start = drain(&limiter);
    let (first_wakes, first_waker) = counting_waker();
    let (second_wakes, second_waker) = counting_waker();
    let wakes = || {
        (
            first_wakes.0.load(Ordering::SeqCst),
            second_wakes.0.load(Ordering::SeqCst),
        )
    };
    let mut first_cx = Context::from_waker(&first_waker);
    let mut second_cx = Context::from_waker(&second_waker);
    let mut first = Box::pin(limiter.acquire_async());
    let mut second = Box::pin(limiter.acquire_async());
    assert!(first.as_mut().poll(&mut first_cx).is_pending());
    assert!(second.as_mut().poll(&mut second_cx).is_pending());
    // Fill 1 (100 ops) is the first task's, a first grant: the second is
    // woken too, and finds nothing once the first has spent the fill.
    clock.advance(MS);
    limiter.backlog();
    assert!(first.as_mut().poll(&mut first_cx).is_ready());
    assert_eq!(wakes(), (1, 1));
    let (ops, next) = spend_until_pending(&limiter, &mut first_cx);
    assert_eq!(ops, 99);
    first = next;
    assert!(second.as_mut().poll(&mut second_cx).is_pending());
    // Fill 2 is the second task's, its first grant: the first, now at the
    // front, is woken too and finds nothing.
    clock.advance(MS);
    limiter.backlog();
    assert!(second.as_mut().poll(&mut second_cx).is_ready());
    assert_eq!(wakes(), (2, 2));
    let (ops, next) = spend_until_pending(&limiter, &mut second_cx);
    assert_eq!(ops, 99);
    second = next;
    assert!(first.as_mut().poll(&mut first_cx).is_pending());
    // From here both loop: each fill wakes the task it is handed to, and
    // no one else.
    for fill in 3..=8u64 {
        clock.advance(MS);
        limiter.backlog();
        let (turn, cx) = if fill % 2 == 1 {
            (&mut first, &mut first_cx)
        } else {
            (&mut second, &mut second_cx)
        };
        assert!(turn.as_mut().poll(cx).is_ready(), "fill {fill}");
        let (ops, next) = spend_until_pending(&limiter, cx);
        assert_eq!(ops, 99, "fill {fill}");
        *turn = next;
        assert_eq!(wakes(), (fill.div_ceil(2) + 1, fill / 2 + 1), "fill {fill}");
    }
    assert_eq!(limiter.stats().admitted, start + 800);
    assert_conserved(&limiter, start + 800);
}

/// A looping task that stops after one op of a hand-off wakes no one: the
/// rest waits in its slice, and the next fill serves the task behind from
/// it, though the fill itself adds nothing.
#[test]
fn what_a_looping_task_leaves_when_it_stops_serves_the_queue_at_the_next_fill() {
    let (limiter, clock) = manual("100K,1.0");
    let start = drain(&limiter);
    let (looper_wakes, looper_waker) = counting_waker();
    let (behind_wakes, behind_waker) = counting_waker();
    let mut looper_cx = Context::from_waker(&looper_waker);
    let mut behind_cx = Context::from_waker(&behind_waker);
    // The looper spends a first fill and waits again; then the other task
    // queues behind it.
    let mut looper = Box::pin(limiter.acquire_async());
    assert!(looper.as_mut().poll(&mut looper_cx).is_pending());
    clock.advance(MS);
    limiter.backlog();
    assert!(looper.as_mut().poll(&mut looper_cx).is_ready());
    let (ops, mut looper) = spend_until_pending(&limiter, &mut looper_cx);
    assert_eq!(ops, 99);
    let mut behind = Box::pin(limiter.acquire_async());
    assert!(behind.as_mut().poll(&mut behind_cx).is_pending());
    // The next fill is the looper's; it takes one op and stops.
    clock.advance(MS);
    limiter.backlog();
    assert!(looper.as_mut().poll(&mut looper_cx).is_ready());
    drop(looper);
    assert_eq!(behind_wakes.0.load(Ordering::SeqCst), 0, "no one woken");
    let ledger = limiter.ledger();
    assert_eq!(ledger.active, 99 * u128::from(ledger.tokens_per_op));
    // A fill with no time to add still serves the queue from the pool.
    limiter.backlog();
    assert_eq!(behind_wakes.0.load(Ordering::SeqCst), 1);
    assert!(behind.as_mut().poll(&mut behind_cx).is_ready());
    assert_eq!(looper_wakes.0.load(Ordering::SeqCst), 2);
    // The rest of the fill is the task behind's to spend.
    let (ops, _) = spend_until_pending(&limiter, &mut behind_cx);
    assert_eq!(ops, 98);
    assert_conserved(&limiter, start + 200);
}

/// Queued tasks that each take one op and end, on an executor that polls
/// a task only when it is woken: every op a fill brings reaches a queued
/// task, in queue order, each woken once.
#[test]
fn queued_one_shot_tasks_polled_only_when_woken_get_every_op_a_fill_brings() {
    let (limiter, clock) = manual("100K,1.0");
    let start = drain(&limiter);
    let mut tasks: Vec<_> = (0..300)
        .map(|_| {
            let (wakes, waker) = counting_waker();
            (Box::pin(limiter.acquire_async()), wakes, waker, 0u64, false)
        })
        .collect();
    for (future, _, waker, _, _) in &mut tasks {
        assert!(future
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_pending());
    }
    let mut finished = Vec::new();
    for _ in 0..2 {
        clock.advance(MS);
        limiter.backlog();
        // Poll the woken tasks, in queue order, until none is woken.
        loop {
            let mut polled = false;
            for (i, (future, wakes, waker, seen, done)) in tasks.iter_mut().enumerate() {
                let now = wakes.0.load(Ordering::SeqCst);
                if *done || now == *seen {
                    continue;
                }
                *seen = now;
                polled = true;
                if future
                    .as_mut()
                    .poll(&mut Context::from_waker(waker))
                    .is_ready()
                {
                    *done = true;
                    finished.push(i);
                }
            }
            if !polled {
                break;
            }
        }
    }
    assert_eq!(finished, (0..200).collect::<Vec<_>>(), "in queue order");
    assert!(tasks
        .iter()
        .all(|(_, wakes, ..)| wakes.0.load(Ordering::SeqCst) <= 1));
    assert_conserved(&limiter, start + 200);
}
