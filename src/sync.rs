//! The one switch between real synchronisation primitives and loom's.
//!
//! Every atomic, lock, thread-local, process-wide counter and blocking wait
//! in the limiter comes from here. Under `--cfg tollgate_loom` (see
//! `loom-tests/`) the same names resolve to loom's model-checked types:
//! loom runs every model thread on one OS thread, so a `std` thread-local
//! or static would be shared by all model threads and hide the very
//! interleavings a model is meant to explore.
//!
//! Parking is per thread: [`park`] and [`Thread::unpark`] are std's (loom's
//! under loom). Loom has no timed park; [`park_timeout`] there yields to
//! the other model threads and returns, which a caller must treat like a
//! timeout or a spurious wake-up, as it already must with std.
//!
//! The cfg is named `tollgate_loom` rather than `loom` so that it switches
//! only this crate: dependencies that know a plain `loom` cfg are untouched.

use std::time::Duration;

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};
#[cfg(not(tollgate_loom))]
pub(crate) use std::thread::{current, park, Thread};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};
#[cfg(tollgate_loom)]
pub(crate) use loom::thread::{current, park, Thread};

/// Parks the current thread for at most `timeout`, or until unparked (or
/// spuriously): callers re-check their condition in a loop.
#[cfg(not(tollgate_loom))]
pub(crate) fn park_timeout(timeout: Duration) {
    std::thread::park_timeout(timeout);
}

/// Loom has no timed park: yield to the other model threads, as a timeout
/// that expired at once would.
#[cfg(tollgate_loom)]
pub(crate) fn park_timeout(_timeout: Duration) {
    loom::thread::yield_now();
}

/// Declares a thread-local through the shim: `std::thread_local!`, or
/// loom's, which gives each model thread its own value.
macro_rules! shim_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        #[cfg(not(tollgate_loom))]
        std::thread_local! {
            $(#[$attr])* static $name: $t = const { $init };
        }
        #[cfg(tollgate_loom)]
        loom::thread_local! {
            $(#[$attr])* static $name: $t = $init;
        }
    };
}
pub(crate) use shim_thread_local as thread_local;

/// Declares a process-wide `AtomicU64` counter through the shim: a plain
/// static, or under loom a lazy static that each model execution resets.
macro_rules! shim_static_counter {
    ($(#[$attr:meta])* static $name:ident = $init:expr;) => {
        #[cfg(not(tollgate_loom))]
        $(#[$attr])*
        static $name: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new($init);
        #[cfg(tollgate_loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: loom::sync::atomic::AtomicU64 =
                loom::sync::atomic::AtomicU64::new($init);
        }
    };
}
pub(crate) use shim_static_counter as static_counter;

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
