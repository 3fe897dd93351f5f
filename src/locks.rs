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

    #[test]
    fn a_poisoned_lock_is_taken_over() {
        let m = Mutex::new(1);
        let rw = RwLock::new(2);
        let _ = std::panic::catch_unwind(|| {
            let _m = m.lock().unwrap();
            let _rw = rw.write().unwrap();
            panic!("while holding both");
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        *lock(&m) += 1;
        *write(&rw) += 1;
        assert_eq!((*lock(&m), *read(&rw)), (2, 3));
    }
}
