//! The filler thread: adds measured time to the pool while anyone waits,
//! and parks while no one does.
//!
//! # Implementation notes
//!
//! The thread is a fallback, not the source of time: every fill measures
//! the clock, so a late fill delivers more tokens, never fewer; callers
//! that find the pool short and the last fill overdue do the fill
//! themselves (`Core::fill_if_late`, core/fill.rs), and the thread waiting at the head
//! of the queue fills when the filler is late (wait.rs). The thread exists
//! to serve waiters that cannot time themselves (async tasks, threads
//! behind the head), so it runs only while someone waits: with no waiter
//! it parks (an idle limiter costs nothing), and a waiter kicks it awake
//! after queueing.
//!
//! `state` word: `RUNNING` (filling every interval), `IDLE` (parked, to be
//! kicked), `STOPPED` (the limiter was dropped; exit). Between fills the
//! thread parks with a timeout, so `stop` (which unparks it) ends it at
//! once however long the interval: dropping a limiter never waits for a
//! fill. The idle hand-off is a store-load pattern with the waiters'
//! registration: the thread stores `IDLE`, fences, then checks for
//! waiters; a waiter registers, fences (in `WaitQueue::enqueue`), then
//! loads the state; with `SeqCst` on both sides one always sees the other.

use std::time::Duration;

use crate::sync::{
    current, fence, lock, park, park_timeout, Arc, AtomicU32, Mutex, Ordering::SeqCst, Thread,
};

const RUNNING: u32 = 0;
const IDLE: u32 = 1;
const STOPPED: u32 = 2;

/// Wakes and stops the filler thread.
#[derive(Debug)]
pub(crate) struct FillerSignal {
    /// `RUNNING`, `IDLE` or `STOPPED` (module notes).
    state: AtomicU32,
    /// The filler thread, once it has started.
    thread: Mutex<Option<Thread>>,
}

impl FillerSignal {
    pub(crate) fn new() -> FillerSignal {
        FillerSignal {
            state: AtomicU32::new(RUNNING),
            thread: Mutex::new(None),
        }
    }

    /// Wakes the thread if it is idle. Call after registering as a waiter.
    pub(crate) fn kick(&self) {
        // SeqCst: the load side of the idle hand-off (module notes).
        if self.state.load(SeqCst) == IDLE
            && self
                .state
                .compare_exchange(IDLE, RUNNING, SeqCst, SeqCst)
                .is_ok()
        {
            self.unpark();
        }
    }

    /// Cuts the running thread's sleep short, so that it re-reads how long
    /// to sleep: a waiter that cannot time the fills now heads the queue,
    /// and the thread may be asleep for the longer spacing it keeps while a
    /// parked thread times them. An idle thread is left to `kick`.
    pub(crate) fn hurry(&self) {
        // SeqCst: as in `kick`.
        if self.state.load(SeqCst) == RUNNING {
            self.unpark();
        }
    }

    /// Tells the thread to exit, and wakes it so it does so now.
    pub(crate) fn stop(&self) {
        // SeqCst: seen by the thread's next state check, after the unpark.
        // A swap rather than a store: the same on hardware, but loom lets a
        // plain store be ordered before a concurrent compare-exchange that
        // did not read it, and would then show the thread going idle after
        // the stop (a deadlock no real execution has).
        self.state.swap(STOPPED, SeqCst);
        self.unpark();
    }

    fn unpark(&self) {
        if let Some(thread) = &*lock(&self.thread) {
            thread.unpark();
        }
    }

    fn state(&self) -> u32 {
        // SeqCst: the thread's side of the hand-off.
        match self.state.load(SeqCst) {
            state @ (RUNNING | IDLE | STOPPED) => state,
            other => panic!("filler: impossible state {other}"),
        }
    }
}

/// What the filler thread drives: the limiter's shared state, seen from
/// below (the core owns a [`FillerSignal`] and implements this, so this
/// module depends on nothing above it).
pub(crate) trait Fills {
    /// The signal that wakes and stops this thread.
    fn filler_signal(&self) -> &FillerSignal;
    /// Whether anyone waits (the load side of the idle hand-off).
    fn has_waiters(&self) -> bool;
    /// How long to sleep before the next fill is due.
    fn until_next_fill(&self, interval: Duration) -> Duration;
    /// Fills now and wakes the waiters it can serve.
    fn fill_and_wake(&self);
}

/// The thread's body: fill every `interval` (or the spacing
/// [`Fills::until_next_fill`] chooses) while anyone waits.
pub(crate) fn run<C: Fills>(core: Arc<C>, interval: Duration) {
    let signal = core.filler_signal();
    // Registered before the first state check: the thread goes `IDLE` only
    // after this, so every kick that finds it idle can unpark it.
    *lock(&signal.thread) = Some(current());
    loop {
        match signal.state() {
            STOPPED => return,
            IDLE => {
                park();
                continue;
            }
            _ => {}
        }
        if !core.has_waiters() {
            // SeqCst: the store side of the idle hand-off.
            if signal
                .state
                .compare_exchange(RUNNING, IDLE, SeqCst, SeqCst)
                .is_ok()
                && {
                    // SeqCst fence: pairs with the waiters' registration fence.
                    fence(SeqCst);
                    core.has_waiters()
                }
            {
                let _ = signal.state.compare_exchange(IDLE, RUNNING, SeqCst, SeqCst);
            }
            continue;
        }
        let wait = core.until_next_fill(interval);
        if !wait.is_zero() {
            // Woken early by `stop` or a kick: the loop re-checks.
            park_timeout(wait);
            continue;
        }
        core.fill_and_wake();
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Condvar;

    /// A core that counts fills; each fill serves every waiter.
    struct Mock {
        signal: FillerSignal,
        waiting: AtomicBool,
        next_fill: Duration,
        fills: std::sync::Mutex<u64>,
        filled: Condvar,
        checks: AtomicU64,
    }

    impl Mock {
        fn new(next_fill: Duration) -> std::sync::Arc<Mock> {
            std::sync::Arc::new(Mock {
                signal: FillerSignal::new(),
                waiting: AtomicBool::new(false),
                next_fill,
                fills: std::sync::Mutex::new(0),
                filled: Condvar::new(),
                checks: AtomicU64::new(0),
            })
        }

        /// Blocks until `n` fills have happened.
        fn wait_for_fills(&self, n: u64) {
            let mut fills = lock(&self.fills);
            while *fills < n {
                fills = self.filled.wait(fills).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    impl Fills for Mock {
        fn filler_signal(&self) -> &FillerSignal {
            &self.signal
        }
        fn has_waiters(&self) -> bool {
            self.checks.fetch_add(1, SeqCst);
            self.waiting.load(SeqCst)
        }
        fn until_next_fill(&self, _: Duration) -> Duration {
            self.next_fill
        }
        fn fill_and_wake(&self) {
            let mut fills = lock(&self.fills);
            *fills += 1;
            self.waiting.store(false, SeqCst);
            self.filled.notify_all();
        }
    }

    fn spawn(core: &std::sync::Arc<Mock>) -> std::thread::JoinHandle<()> {
        let core = std::sync::Arc::clone(core);
        std::thread::spawn(move || run(core, Duration::from_secs(3600)))
    }

    /// A waiter that registers and kicks is always served, whether the
    /// thread was running or idle: a lost kick would hang the test.
    #[test]
    fn every_kick_after_registering_is_served() {
        let core = Mock::new(Duration::ZERO);
        let thread = spawn(&core);
        for round in 1..=200 {
            // SeqCst: the waiter's side of the idle hand-off.
            core.waiting.store(true, SeqCst);
            core.signal.kick();
            core.wait_for_fills(round);
        }
        core.signal.stop();
        thread.join().unwrap();
        assert_eq!(*lock(&core.fills), 200);
    }

    /// With no waiter the thread parks instead of polling: it checks for
    /// waiters a bounded number of times while nobody kicks it.
    #[test]
    fn an_idle_thread_parks() {
        let core = Mock::new(Duration::ZERO);
        let thread = spawn(&core);
        // Make sure it has run and gone idle.
        while core.signal.state.load(SeqCst) != IDLE {
            std::thread::yield_now();
        }
        let checks = core.checks.load(SeqCst);
        for _ in 0..1000 {
            std::thread::yield_now();
        }
        // The idle thread wakes only on a kick or a stop (or a rare
        // spurious unpark, after which it re-checks once and parks again).
        assert!(core.checks.load(SeqCst) <= checks + 2);
        core.signal.stop();
        thread.join().unwrap();
        assert_eq!(*lock(&core.fills), 0);
    }

    /// Stopping ends a thread that sleeps until a fill an hour away:
    /// dropping a limiter never waits for a fill (a missed unpark would
    /// hang the test for an hour).
    #[test]
    fn stop_ends_a_thread_sleeping_toward_a_distant_fill() {
        let core = Mock::new(Duration::from_secs(3600));
        core.waiting.store(true, SeqCst);
        let thread = spawn(&core);
        core.signal.stop();
        thread.join().unwrap();
        assert_eq!(*lock(&core.fills), 0);
    }
}
