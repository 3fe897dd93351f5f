//! The filler thread: adds measured time to the pool while anyone waits,
//! and sleeps on a futex while no one does.
//!
//! # Implementation notes
//!
//! The thread is a fallback, not the source of time: every fill measures
//! the clock, so a late fill delivers more tokens, never fewer, and callers
//! that find the pool short and the last fill overdue do the fill
//! themselves (`Core::fill_if_late`). The thread exists to wake sleeping
//! waiters, so it runs only while someone waits: with no waiter it parks
//! on [`FillerSignal`] (an idle limiter costs nothing), and a waiter kicks
//! it awake before sleeping.
//!
//! `state` word: `RUNNING` (filling every interval), `IDLE` (parked on the
//! futex, to be kicked), `STOPPED` (the limiter was dropped; exit). The
//! idle hand-off is a store-load pattern with the waiters' registration:
//! the thread stores `IDLE`, fences, then checks for waiters; a waiter
//! registers, fences (in `WaitQueue::begin_sleep`/`park`), then loads the
//! state; with `SeqCst` fences on both sides one always sees the other.

use std::time::Duration;

use super::core::Core;
use crate::sync::{fence, Arc, Futex, Ordering::SeqCst};

const RUNNING: u32 = 0;
const IDLE: u32 = 1;
const STOPPED: u32 = 2;

/// Wakes and stops the filler thread.
#[derive(Debug)]
pub(crate) struct FillerSignal {
    state: Futex,
}

impl FillerSignal {
    pub(crate) fn new() -> FillerSignal {
        FillerSignal {
            state: Futex::new(RUNNING),
        }
    }

    /// Wakes the thread if it is idle. Call after registering as a waiter.
    pub(crate) fn kick(&self) {
        // SeqCst: the load side of the idle hand-off (module notes).
        if self.state.word().load(SeqCst) == IDLE
            && self
                .state
                .word()
                .compare_exchange(IDLE, RUNNING, SeqCst, SeqCst)
                .is_ok()
        {
            self.state.wake_one();
        }
    }

    /// Tells the thread to exit.
    pub(crate) fn stop(&self) {
        // SeqCst: seen by the thread's next state check.
        self.state.word().store(STOPPED, SeqCst);
        self.state.wake_one();
    }

    fn state(&self) -> u32 {
        // SeqCst: the thread's side of the hand-off.
        match self.state.word().load(SeqCst) {
            state @ (RUNNING | IDLE | STOPPED) => state,
            other => panic!("filler: impossible state {other}"),
        }
    }
}

/// The thread's body: fill every `interval` while anyone waits.
pub(crate) fn run(core: Arc<Core>, interval: Duration) {
    let signal = core.filler_signal();
    loop {
        match signal.state() {
            STOPPED => return,
            IDLE => {
                signal.state.wait(IDLE);
                continue;
            }
            _ => {}
        }
        if !core.has_waiters() {
            // SeqCst: the store side of the idle hand-off.
            if signal
                .state
                .word()
                .compare_exchange(RUNNING, IDLE, SeqCst, SeqCst)
                .is_ok()
                && {
                    // SeqCst fence: pairs with the waiters' registration fence.
                    fence(SeqCst);
                    core.has_waiters()
                }
            {
                let _ = signal
                    .state
                    .word()
                    .compare_exchange(IDLE, RUNNING, SeqCst, SeqCst);
            }
            continue;
        }
        std::thread::sleep(core.until_next_fill(interval));
        core.fill_and_wake();
    }
}
