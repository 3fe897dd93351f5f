//! Locks that keep serving after a panic under a lock, for `doorman`,
//! `quota` and `throttle`.
//!
//! The state behind these locks (a Doorman resource's leases, the resource
//! map, the election view, a transport's channels; the quota counters and
//! parsed documents; the throttle's rules, queues and limiter shards) is a
//! valid value at every point a panic could unwind from: a panic while
//! holding the lock cannot leave it half-updated in a way later requests
//! would mind more than losing the service. So a poisoned lock is taken over
//! as it is rather than the panic propagated to every later caller.
//!
//! The helpers are extension traits, so a call site reads like the plain
//! method it stands for: `self.leases.lock_unpoisoned()`.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], taking the lock over if a panic poisoned it.
pub trait LockUnpoisoned<T> {
    /// Locks, whether or not a holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], taking the lock over if a panic
/// poisoned it.
pub trait RwLockUnpoisoned<T> {
    /// Locks for reading, whether or not a writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;

    /// Locks for writing, whether or not a writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockUnpoisoned<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `hold` on a thread of its own and checks that it panicked.
    fn panics(hold: impl FnOnce() + Send) {
        let joined = std::thread::scope(|s| s.spawn(hold).join());
        assert!(joined.is_err());
    }

    #[test]
    fn a_poisoned_mutex_is_taken_over_with_what_it_held() {
        let m = Mutex::new(vec![1]);
        panics(|| {
            m.lock().unwrap().push(2);
            let _held = m.lock().unwrap();
            panic!("while holding the lock");
        });
        assert!(m.is_poisoned());
        m.lock_unpoisoned().push(3);
        assert_eq!(*m.lock_unpoisoned(), [1, 2, 3]);
    }

    #[test]
    fn a_poisoned_rwlock_is_taken_over_for_reading_and_writing() {
        let rw = RwLock::new(1);
        panics(|| {
            *rw.write().unwrap() += 1;
            let _held = rw.write().unwrap();
            panic!("while writing");
        });
        assert!(rw.is_poisoned());
        *rw.write_unpoisoned() += 1;
        assert_eq!(*rw.read_unpoisoned(), 3);
    }
}
