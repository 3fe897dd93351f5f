//! The table's switch between real synchronisation primitives and loom's.
//!
//! Every atomic, shared cell and yield in the table comes from here. Under
//! `--cfg tollgate_loom` (see `loom-tests/`) the same names resolve to
//! loom's model-checked types, so the models in `loom-tests/tests/table.rs`
//! explore every interleaving of the probe, the lock bit and the rebuild.
//! The limiter core has a shim of its own (`crates/core/src/sync.rs`) with
//! the same cfg: each crate that loom checks keeps its one switch private,
//! rather than one crate exporting its shim to another.

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

/// Lets other threads run: std's, or under loom a switch to another model
/// thread (a spin loop must yield under loom, or the model never ends).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(tollgate_loom))]
    std::thread::yield_now();
    #[cfg(tollgate_loom)]
    loom::thread::yield_now();
}

/// A cell shared between threads whose accesses the caller orders (by a
/// lock bit, say): std's `UnsafeCell`, or under loom loom's, which checks
/// every access against the happens-before order the caller claims.
///
/// Accesses go through [`with`](UnsafeCell::with) and
/// [`with_mut`](UnsafeCell::with_mut), loom's interface: loom records a
/// read or a write at each call. `repr(transparent)`, so an all-zero
/// `UnsafeCell<T>` outside loom is an all-zero `T`.
#[cfg(not(tollgate_loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(tollgate_loom))]
impl<T> UnsafeCell<T> {
    /// Runs `f` with a pointer for reading the value.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a pointer for writing the value.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(tollgate_loom)]
pub(crate) use loom::cell::UnsafeCell;
