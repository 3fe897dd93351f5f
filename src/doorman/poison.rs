//! Locks that carry on after a panic elsewhere.
//!
//! The Doorman state behind a lock (a resource's leases, the resource map,
//! the election view, a transport's channels) stays consistent between
//! statements: a panic while holding the lock cannot leave it half-updated
//! in a way later requests would mind more than losing the server. So a
//! poisoned lock is used as it is rather than propagating the panic.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], ignoring poison.
pub(crate) trait LockUnpoisoned<T> {
    /// Locks, whether or not a holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], ignoring poison.
pub(crate) trait RwLockUnpoisoned<T> {
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

    #[test]
    fn a_poisoned_lock_is_used_as_it_is() {
        let m = Mutex::new(1);
        let rw = RwLock::new(2);
        let _ = std::panic::catch_unwind(|| {
            let _m = m.lock().unwrap();
            let _rw = rw.write().unwrap();
            panic!("while holding both");
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.lock_unpoisoned() += 1;
        *rw.write_unpoisoned() += 1;
        assert_eq!((*m.lock_unpoisoned(), *rw.read_unpoisoned()), (2, 3));
    }
}
