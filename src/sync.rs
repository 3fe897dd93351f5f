//! The one switch between real synchronisation primitives and loom's.
//!
//! Every atomic, lock and blocking wait in the limiter comes from here. Under
//! `--cfg tollgate_loom` (see `loom-tests/`) the same names resolve to loom's
//! model-checked types; loom has no futex, so [`Futex`] is modelled there
//! with loom's `Mutex` + `Condvar`, which loom explores exhaustively instead
//! of spinning.
//!
//! The cfg is named `tollgate_loom` rather than `loom` so that it switches
//! only this crate: dependencies that know a plain `loom` cfg are untouched.

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU32, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU32, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};

/// A 32-bit word that threads can sleep on until it changes.
///
/// `wait(expected)` returns once the word is observed to differ from
/// `expected`, or on a wake (possibly spurious): callers always re-check their
/// condition in a loop.
#[derive(Debug)]
pub(crate) struct Futex {
    word: AtomicU32,
    #[cfg(tollgate_loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(tollgate_loom)]
    cond: loom::sync::Condvar,
}

impl Futex {
    pub(crate) fn new(value: u32) -> Futex {
        Futex {
            word: AtomicU32::new(value),
            #[cfg(tollgate_loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(tollgate_loom)]
            cond: loom::sync::Condvar::new(),
        }
    }

    /// The word itself, for loads and read-modify-writes.
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Sleeps while the word equals `expected`.
    #[cfg(not(tollgate_loom))]
    pub(crate) fn wait(&self, expected: u32) {
        atomic_wait::wait(&self.word, expected);
    }

    /// Wakes at most one sleeper.
    #[cfg(not(tollgate_loom))]
    pub(crate) fn wake_one(&self) {
        atomic_wait::wake_one(&self.word);
    }

    /// Wakes every sleeper.
    #[cfg(not(tollgate_loom))]
    pub(crate) fn wake_all(&self) {
        atomic_wait::wake_all(&self.word);
    }

    #[cfg(tollgate_loom)]
    pub(crate) fn wait(&self, expected: u32) {
        let guard = self.lock.lock().unwrap();
        // SeqCst: the model of the kernel's check-and-sleep, ordered against
        // the waker's change of the word (made before it takes `lock`).
        if self.word.load(Ordering::SeqCst) == expected {
            drop(self.cond.wait(guard).unwrap());
        }
    }

    #[cfg(tollgate_loom)]
    pub(crate) fn wake_one(&self) {
        let _guard = self.lock.lock().unwrap();
        self.cond.notify_one();
    }

    #[cfg(tollgate_loom)]
    pub(crate) fn wake_all(&self) {
        let _guard = self.lock.lock().unwrap();
        self.cond.notify_all();
    }
}

/// Locks a mutex, ignoring poisoning: the limiter's critical sections leave
/// their data consistent at every unwinding point (they do plain arithmetic).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Tries to lock a mutex without blocking; `None` when another thread holds it.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
