//! The acquire fast paths, shared by the blocking and async acquires: the
//! thread's budget, then its slice; and where tokens handed beyond a
//! served wait's need are kept.

use super::budget;
use super::core::Core;
use crate::sync::Arc;

/// The fast paths: the thread's budget, then its slice.
#[inline]
pub(crate) fn take_fast(core: &Arc<Core>, need: u64) -> bool {
    budget::try_take(core, need) || budget::refill(core, need)
}

/// Keeps tokens a served wait was handed beyond its need in the thread's
/// budget.
pub(crate) fn keep_extra(core: &Arc<Core>, extra: u64) {
    budget::deposit(core, extra);
}
