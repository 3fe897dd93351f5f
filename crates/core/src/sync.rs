//! The one switch between real synchronisation primitives and loom's.
//!
//! Every atomic, lock, thread-local, process-wide counter and blocking
//! wait in the limiter comes from here (the throttler's keyed table, in
//! `crates/table`, has a shim of its own with the same cfg). Under `--cfg tollgate_loom` (see
//! `loom-tests/`) the same names resolve to loom's model-checked types:
//! loom runs every model thread on one OS thread, so a `std` thread-local
//! or static would be shared by all model threads and hide the very
//! interleavings a model is meant to explore.
//!
//! Parking is per thread: `park`, `park_timeout` and `Thread::unpark`
//! are std's. Under loom they keep std's contract with a token of their
//! own (see `loom_park`): loom keeps a thread's unpark token in its
//! scheduler state, where a `yield_now` or blocking on a loom lock, condvar
//! or join clears it, while std's token survives until a park consumes it.
//! Loom has no timed park either; `park_timeout` there yields to the
//! other model threads and returns, which a caller must treat like a
//! timeout or a spurious wake-up, as it already must with std.
//!
//! The cfg is named `tollgate_loom` rather than `loom` so that it switches
//! only this crate: dependencies that know a plain `loom` cfg are untouched.

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicU32},
    Arc,
};
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};
#[cfg(not(tollgate_loom))]
pub(crate) use std::thread::{current, park, JoinHandle, Thread};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicU32},
    Arc,
};
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};
#[cfg(tollgate_loom)]
pub(crate) use loom::thread::JoinHandle;
#[cfg(tollgate_loom)]
pub(crate) use loom_park::{current, park, park_timeout, Thread};

/// Parks the current thread for at most `timeout`, or until unparked (or
/// spuriously): callers re-check their condition in a loop.
#[cfg(not(tollgate_loom))]
pub(crate) fn park_timeout(timeout: std::time::Duration) {
    std::thread::park_timeout(timeout);
}

/// Spawns a named thread: a std thread, or a model thread under loom.
pub(crate) fn spawn_named<F>(name: &str, body: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    #[cfg(not(tollgate_loom))]
    let builder = std::thread::Builder::new();
    #[cfg(tollgate_loom)]
    let builder = loom::thread::Builder::new();
    builder.name(name.to_owned()).spawn(body)
}

/// std's park contract on loom's threads.
///
/// Loom's own park and unpark differ from std's in two ways that matter
/// here (loom 0.7, `rt/thread.rs` and `rt/mod.rs`):
/// - an unpark that finds its thread running is kept in the thread's
///   scheduler state (`Runnable { unparked: true }`), which `yield_now` or
///   blocking on a loom mutex, condvar or join overwrites: the token is
///   lost, and a later park blocks for ever, where std's would return;
/// - an unpark that finds its thread blocked on a loom mutex or join makes
///   it runnable there, and loom then fails an internal assertion (a join
///   woken without its notification), where std's would only store a token.
///
/// So the token lives in a word of the thread's own, with std's futex
/// parker protocol (`EMPTY`, `NOTIFIED`, `PARKED`), and loom's unpark is
/// called only on a thread that is inside [`park`]. Every access is a
/// read-modify-write: loom 0.7 lets a read-modify-write read around a
/// racing plain store (tokio-rs/loom#254). The shim's park never returns
/// spuriously; [`park_timeout`], which returns at once, stands for the
/// early returns a caller must handle.
#[cfg(tollgate_loom)]
mod loom_park {
    use std::time::Duration;

    use loom::sync::atomic::{
        AtomicU32,
        Ordering::{Acquire, Relaxed, Release},
    };

    /// No token.
    const EMPTY: u32 = 0;
    /// A token is available.
    const NOTIFIED: u32 = 1;
    /// The thread is in `park`, about to block in loom's park or blocked
    /// (`EMPTY - 1`: park takes a token or parks with one decrement).
    const PARKED: u32 = u32::MAX;

    loom::thread_local! {
        /// The current model thread's parker word.
        static STATE: std::sync::Arc<AtomicU32> = std::sync::Arc::new(AtomicU32::new(EMPTY));
    }

    /// A handle to a model thread, to unpark it.
    #[derive(Debug, Clone)]
    pub(crate) struct Thread {
        thread: loom::thread::Thread,
        state: std::sync::Arc<AtomicU32>,
    }

    impl Thread {
        /// Makes the thread's token available and wakes it if it is parked.
        pub(crate) fn unpark(&self) {
            // Release: pairs with the Acquire in `park`, as std's unpark
            // synchronises with the park that consumes its token.
            match self.state.swap(NOTIFIED, Release) {
                PARKED => self.thread.unpark(),
                EMPTY | NOTIFIED => {}
                other => panic!("park: impossible state {other}"),
            }
        }
    }

    /// A handle to the current model thread.
    pub(crate) fn current() -> Thread {
        Thread {
            thread: loom::thread::current(),
            state: STATE.with(std::sync::Arc::clone),
        }
    }

    /// Blocks until the thread's token is available, and consumes it.
    pub(crate) fn park() {
        let state = STATE.with(std::sync::Arc::clone);
        // NOTIFIED -> EMPTY (a token: return) or EMPTY -> PARKED.
        // Acquire: pairs with the Release in `Thread::unpark`.
        match state.fetch_sub(1, Acquire) {
            NOTIFIED => return,
            EMPTY => {}
            other => panic!("park: impossible state {other}"),
        }
        // An unpark that finds PARKED calls loom's unpark, which either
        // wakes loom's park or is kept for it (nothing blocks in between).
        loop {
            loom::thread::park();
            // Acquire: as above.
            if state
                .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// A park whose timeout expires at once: lets the other model threads
    /// run and returns, leaving any token for the next park (as a timed
    /// park that timed out does).
    pub(crate) fn park_timeout(_timeout: Duration) {
        loom::thread::yield_now();
    }
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
#[inline]
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
