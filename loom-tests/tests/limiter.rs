//! Loom models: fills, takes, slice refills and steals neither create nor
//! lose tokens; a waiter blocked while tokens arrive is always woken, with
//! its tokens already handed to it; a waiter that times out or is dropped
//! while a grant races it gives back what it was handed.
//!
//! A served task that takes one op and ends leaves the rest of its
//! hand-off to the task queued behind it, which is woken to take it; a
//! task acquiring in a loop wakes no one, and what it leaves when it stops
//! reaches the task behind at the next fill.
//!
//! The filler thread's idle hand-off loses no kick, and stopping it ends
//! it wherever it is. Thread budgets conserve tokens, a thread that exits
//! gives its budget back, and a timed-out waiter keeps a racing hand-off
//! only in its budget.
//!
//! Most models drive a limiter on a manual clock with no filler thread: a
//! "filler" thread advances the clock and calls `backlog()`, which fills
//! and wakes exactly as the filler thread does. The filler models run the
//! real filler thread (a model thread) on the manual clock; under loom its
//! timed sleeps return at once (see the crate's `sync.rs`), so it polls the
//! clock, as a thread whose every timeout expires would. Loom explores
//! every interleaving (bounded by LOOM_MAX_PREEMPTIONS) and fails on a
//! deadlock, i.e. a waiter never woken or a thread that never ends.
#![cfg(tollgate_loom)]

use std::future::Future;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use tollgate::{ManualClock, RateLimiter};

/// 1000 ops/s: one op per millisecond; A = 2 ops.
fn limiter(slices: usize) -> (Arc<RateLimiter>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1000,1.0".parse().unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .slices(slices)
        .build();
    (Arc::new(limiter), clock)
}

/// `filled - dropped == admitted + active + waiting + in_flight`.
fn assert_conserved(limiter: &RateLimiter, admitted_ops: u64) {
    let l = limiter.ledger();
    let admitted = u128::from(admitted_ops) * u128::from(l.tokens_per_op);
    assert_eq!(
        l.filled - l.dropped,
        admitted + l.active + l.waiting + l.in_flight,
        "{l:?}"
    );
}

/// [`assert_conserved`] once the joined threads have run their
/// thread-local destructors, which give their budgets back. std's join
/// returns after them; loom's returns before them (loom's `rt::spawn` runs
/// `thread_done`, which drops a model thread's locals, after the join's
/// notification), so this yields to the exiting threads while the ledger
/// is short, a bounded number of times.
fn assert_conserved_after_exits(limiter: &RateLimiter, admitted_ops: u64) {
    for _ in 0..8 {
        let l = limiter.ledger();
        let admitted = u128::from(admitted_ops) * u128::from(l.tokens_per_op);
        if l.filled - l.dropped == admitted + l.active + l.waiting + l.in_flight {
            return;
        }
        thread::yield_now();
    }
    assert_conserved(limiter, admitted_ops);
}

#[test]
fn concurrent_takes_and_a_fill_conserve_tokens() {
    loom::model(|| {
        let (limiter, clock) = limiter(2);
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || u64::from(limiter.try_acquire_n(2)))
        };
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || u64::from(limiter.try_acquire()))
        };
        clock.advance(Duration::from_millis(1));
        limiter.backlog();
        let admitted = 2 * taker.join().unwrap() + other.join().unwrap();
        // The start allowance plus one millisecond: at most two ops.
        assert!(admitted <= 2);
        assert_conserved(&limiter, admitted);
    });
}

#[test]
fn a_blocked_waiter_is_woken_by_a_fill() {
    loom::model(|| {
        let (limiter, clock) = limiter(2);
        assert!(limiter.try_acquire()); // empty the start allowance
        let waiter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                limiter.acquire();
            })
        };
        clock.advance(Duration::from_millis(1));
        limiter.backlog();
        waiter.join().unwrap();
        assert_conserved(&limiter, 2);
    });
}

#[test]
fn two_waiters_are_both_woken_by_two_ops_of_time() {
    loom::model(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire());
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || {
                    limiter.acquire();
                })
            })
            .collect();
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_conserved(&limiter, 3);
    });
}

#[test]
fn a_steal_from_another_slice_conserves_tokens() {
    loom::model(|| {
        let (limiter, clock) = limiter(2);
        clock.advance(Duration::from_millis(1));
        limiter.backlog(); // two ops in the pool
        let a = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || u64::from(limiter.try_acquire_n(2)))
        };
        let b = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || u64::from(limiter.try_acquire()))
        };
        let admitted = 2 * a.join().unwrap() + b.join().unwrap();
        assert!((1..=2).contains(&admitted), "one of them must get tokens");
        assert_conserved(&limiter, admitted);
    });
}

#[test]
fn an_async_waiter_is_woken_by_a_fill() {
    loom::model(|| {
        let (limiter, clock) = limiter(2);
        assert!(limiter.try_acquire());
        let waiter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                loom::future::block_on(limiter.acquire_async());
            })
        };
        clock.advance(Duration::from_millis(1));
        limiter.backlog();
        waiter.join().unwrap();
        assert_conserved(&limiter, 2);
    });
}

#[test]
fn a_sync_and_an_async_waiter_share_one_queue_and_are_both_served() {
    // Three threads on one queue: explored with at most two preemptions
    // (a third multiplies the run 25 times, to ten minutes on two cores,
    // for interleavings of the same enqueue, wake and grant steps).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(model.preemption_bound.map_or(2, |bound| bound.min(2)));
    model.check(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire());
        let sync = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                limiter.acquire();
            })
        };
        let task = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                loom::future::block_on(limiter.acquire_async());
            })
        };
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        sync.join().unwrap();
        task.join().unwrap();
        assert_conserved(&limiter, 3);
    });
}

#[test]
fn a_timed_out_waiter_keeps_nothing_it_was_not_granted() {
    loom::model(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire());
        let waiter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                u64::from(limiter.acquire_timeout(1, Duration::from_millis(1)).is_ok())
            })
        };
        // Past the waiter's deadline, with one op of time: the grant and
        // the timeout race.
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        // A grant that won the race may carry a hand-off beyond the op,
        // kept in the waiter thread's budget until that thread exits.
        let admitted = 1 + waiter.join().unwrap();
        assert_conserved_after_exits(&limiter, admitted);
    });
}

#[test]
fn a_dropped_async_waiter_gives_back_a_racing_grant() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    loom::model(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire());
        let dropper = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let mut cx = Context::from_waker(Waker::noop());
                let mut fut = Box::pin(limiter.acquire_async());
                let ready = matches!(fut.as_mut().poll(&mut cx), Poll::Ready(_));
                drop(fut);
                u64::from(ready)
            })
        };
        clock.advance(Duration::from_millis(1));
        limiter.backlog();
        let admitted = 1 + dropper.join().unwrap();
        assert_conserved(&limiter, admitted);
        // Whatever the drop gave back is in the pool for the next caller.
        assert_eq!(u64::from(limiter.try_acquire()), 2 - admitted);
    });
}

/// A waker that unparks the thread that made it, with std's park protocol
/// (`EMPTY`, `NOTIFIED`, `PARKED`): loom's own park loses an unpark that
/// finds its thread running once that thread blocks on a lock, and its
/// unpark wakes a thread blocked in a join (the crate's `sync.rs` explains),
/// so loom's unpark is called only on a thread inside `park`.
struct Unparker {
    thread: thread::Thread,
    state: AtomicU32,
}

const EMPTY: u32 = 0;
const NOTIFIED: u32 = 1;
const PARKED: u32 = 2;

impl Unparker {
    fn new() -> std::sync::Arc<Unparker> {
        std::sync::Arc::new(Unparker {
            thread: thread::current(),
            state: AtomicU32::new(EMPTY),
        })
    }

    fn take_token(&self) -> bool {
        self.state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Parks until woken (consuming the wake).
    fn park(&self) {
        if self.take_token() {
            return;
        }
        if self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            assert!(self.take_token());
            return;
        }
        loop {
            thread::park();
            if self.take_token() {
                return;
            }
        }
    }
}

impl Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        if self.state.swap(NOTIFIED, Ordering::Release) == PARKED {
            self.thread.unpark();
        }
    }
}

/// Polls `fut` to completion, parking between polls.
fn block_on<F: Future>(
    fut: std::pin::Pin<&mut F>,
    unparker: &std::sync::Arc<Unparker>,
) -> F::Output {
    let waker = Waker::from(std::sync::Arc::clone(unparker));
    block_on_with(fut, unparker, &waker)
}

/// [`block_on`] with `waker`, `unparker`'s: one task polling one future
/// after another shows the limiter one waker (`Waker::will_wake` may tell
/// two wakers made apart from the same `Arc` as different).
fn block_on_with<F: Future>(
    fut: std::pin::Pin<&mut F>,
    unparker: &std::sync::Arc<Unparker>,
    waker: &Waker,
) -> F::Output {
    let mut cx = Context::from_waker(waker);
    let mut fut = fut;
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        unparker.park();
    }
}

/// Two tasks queue, one on this thread and one on another, and a fill
/// brings two ops: the first in the queue is handed both, takes one and
/// ends, and leaves the other in the pool, where the second, woken without
/// a grant, serves itself. A lost wake leaves a task parked for ever (loom
/// reports the deadlock); a token lost or made on the way breaks the
/// ledger.
#[test]
fn a_one_shot_task_leaves_its_hand_off_to_the_task_behind() {
    loom::model(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire()); // empty the start allowance
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let unparker = Unparker::new();
                block_on(std::pin::pin!(limiter.acquire_async()), &unparker);
            })
        };
        let unparker = Unparker::new();
        let waker = Waker::from(std::sync::Arc::clone(&unparker));
        let mut own = std::pin::pin!(limiter.acquire_async());
        // Queues, ahead of or behind the other task.
        assert!(own
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // Two ops of time, handed to whichever task is first.
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        block_on(own, &unparker);
        other.join().unwrap();
        assert_conserved(&limiter, 3);
    });
}

/// A task that waits again after spending its hand-off acquires in a loop:
/// its next grant wakes no one else. Here it then stops after one op,
/// leaving the other in the pool, while a one-shot task on another thread
/// queues (before or after the grant, or not at all if it finds the op):
/// the next fill, though it adds nothing, serves it from the pool. A lost
/// wake leaves that task parked for ever (loom reports the deadlock); a
/// token lost or made breaks the ledger.
#[test]
fn what_a_looping_task_leaves_reaches_the_task_behind_at_the_next_fill() {
    loom::model(|| {
        let (limiter, clock) = limiter(1);
        assert!(limiter.try_acquire()); // empty the start allowance
        let unparker = Unparker::new();
        let waker = Waker::from(std::sync::Arc::clone(&unparker));
        let mut first = std::pin::pin!(limiter.acquire_async());
        assert!(first
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // Two ops: this task's op and one beyond, which it spends; its
        // next acquire waits, as a task acquiring in a loop.
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        block_on_with(first, &unparker, &waker);
        block_on_with(std::pin::pin!(limiter.acquire_async()), &unparker, &waker);
        let mut again = std::pin::pin!(limiter.acquire_async());
        assert!(again
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let unparker = Unparker::new();
                block_on(std::pin::pin!(limiter.acquire_async()), &unparker);
            })
        };
        // Two more ops, the looping task's: it takes one and stops.
        clock.advance(Duration::from_millis(2));
        limiter.backlog();
        block_on_with(again, &unparker, &waker);
        // A fill with no time to add.
        limiter.backlog();
        other.join().unwrap();
        assert_conserved(&limiter, 5);
    });
}

/// 1000 ops/s with the filler thread, on a manual clock.
fn limiter_with_filler() -> (RateLimiter, ManualClock) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1000,1.0".parse().unwrap())
        .clock(clock.clone())
        .slices(1)
        .build();
    (limiter, clock)
}

#[test]
fn a_waiter_that_kicks_an_idling_filler_is_served_by_it() {
    loom::model(|| {
        let (limiter, clock) = limiter_with_filler();
        assert!(limiter.try_acquire()); // empty the start allowance
        {
            let unparker = Unparker::new();
            let waker = Waker::from(std::sync::Arc::clone(&unparker));
            let mut fut = std::pin::pin!(limiter.acquire_async());
            // Queues and kicks the filler, which may be going idle meanwhile;
            // no time has passed, so nothing can serve it yet.
            assert!(fut
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            clock.advance(Duration::from_millis(1));
            // This thread only re-polls, which never fills: only the filler
            // thread can serve the waiter. A lost kick leaves it parked for
            // ever, and loom reports the deadlock.
            block_on(fut, &unparker);
        }
        assert_conserved(&limiter, 2);
        // Stopping the filler wherever it is (filling, going idle, parked)
        // ends it: the drop joins it.
        drop(limiter);
    });
}

#[test]
fn stopping_a_starting_or_idle_filler_ends_it() {
    loom::model(|| {
        let (limiter, _clock) = limiter_with_filler();
        // The filler may not have started, may be checking for waiters,
        // going idle or parked: the drop stops and joins it.
        drop(limiter);
    });
}

/// 1000 ops/s on one slice with a 16 ms fill interval: the active pool
/// covers 24 ops, a slice chunk 6 ops, and a thread budget takes 1.5 ops
/// beyond its need (budget.rs), so budgets are in play.
fn limiter_with_budgets() -> (Arc<RateLimiter>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder("1000,1.0".parse().unwrap())
        .clock(clock.clone())
        .filler_thread(false)
        .slices(1)
        .fill_interval(Duration::from_millis(16))
        .build();
    (Arc::new(limiter), clock)
}

#[test]
fn budgets_conserve_tokens_and_go_back_when_their_threads_exit() {
    loom::model(|| {
        let (limiter, clock) = limiter_with_budgets();
        clock.advance(Duration::from_millis(8));
        limiter.backlog(); // the start allowance and 8 ms: 9 ops
                           // The slow path takes a chunk beyond its op and keeps it in the
                           // (only) slice: 6 ops there, 2 in `central`.
        assert!(limiter.try_acquire());
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                // The first take refills the thread's budget from the slice
                // (its op and 1.5 more), the second spends from the budget.
                thread::spawn(move || {
                    (0..2)
                        .map(|_| u64::from(limiter.try_acquire()))
                        .sum::<u64>()
                })
            })
            .collect();
        // A fill racing the refills.
        clock.advance(Duration::from_millis(1));
        limiter.backlog();
        let admitted: u64 = takers.into_iter().map(|t| t.join().unwrap()).sum();
        // Ten ops of time, five asked for: every take succeeds (the slow
        // path finds `central` when a refill finds the slice short).
        assert_eq!(admitted, 4);
        // Each thread exits with half an op in its budget. The ledger counts
        // a budget as admitted until its thread gives it back: balanced only
        // if the exiting threads gave their budgets back.
        assert_conserved_after_exits(&limiter, 1 + admitted);
    });
}

#[test]
fn a_served_waiter_keeps_its_hand_off_in_a_budget_until_it_exits() {
    loom::model(|| {
        let (limiter, clock) = limiter_with_budgets();
        assert!(limiter.try_acquire()); // empty the start allowance
        let waiter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                limiter.acquire();
                // A second op from what the hand-off left in the budget.
                u64::from(limiter.try_acquire())
            })
        };
        clock.advance(Duration::from_millis(4));
        limiter.backlog(); // 4 ops: one for the waiter, the rest handed off
        let second = waiter.join().unwrap();
        assert_eq!(second, 1, "4 ops of time, 2 asked for");
        // What is left of the hand-off goes back when the waiter exits.
        assert_conserved_after_exits(&limiter, 3);
    });
}

#[test]
fn a_timed_out_waiter_keeps_a_racing_hand_off_only_in_its_budget() {
    loom::model(|| {
        let (limiter, clock) = limiter_with_budgets();
        assert!(limiter.try_acquire()); // empty the start allowance
        let waiter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                u64::from(limiter.acquire_timeout(1, Duration::from_millis(1)).is_ok())
            })
        };
        // Past the waiter's deadline, with four ops of time: a grant with a
        // hand-off of three ops races the timeout. Granted, the waiter keeps
        // the hand-off in its budget and gives it back on exit; timed out,
        // it keeps nothing.
        clock.advance(Duration::from_millis(4));
        limiter.backlog();
        let admitted = 1 + waiter.join().unwrap();
        assert_conserved_after_exits(&limiter, admitted);
    });
}
