//! Lock helpers that keep serving after a panic under a lock, shared by the
//! `quota` and `throttle` modules.
//!
//! The state behind these locks (counters, maps of limiter states, parsed
//! documents) is a valid value at every point a panic could unwind from,
//! so a poisoned lock is taken over rather than propagated.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, taking it over if a panic poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Read-locks `lock`, taking it over if a panic poisoned it.
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Write-locks `lock`, taking it over if a panic poisoned it.
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    match lock.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
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
        lock(&m).push(3);
        assert_eq!(*lock(&m), [1, 2, 3]);
    }

    #[test]
    fn a_poisoned_rwlock_is_taken_over_for_reading_and_writing() {
        let rw = RwLock::new(1);
        panics(|| {
            let _held = rw.write().unwrap();
            panic!("while writing");
        });
        assert!(rw.is_poisoned());
        *write(&rw) += 1;
        assert_eq!(*read(&rw), 2);
    }
}
