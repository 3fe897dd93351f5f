//! Thread-local budgets: the acquire fast paths, shared by the blocking
//! and async acquires (the thread's budget with no atomic at all, then its
//! slice), and where tokens handed beyond a served wait's need are kept.
//!
//! # Implementation notes
//!
//! A compare-exchange costs 15-20 ns on a virtualised core, which caps one
//! thread near 60M acquires/s however little else it does. So each thread
//! keeps a small budget of already-taken tokens for the one limiter it used
//! last, in a thread-local `Cell`: an acquire that fits in it is a
//! thread-local compare and subtract. The budget is refilled from the
//! caller's slice with one compare-exchange that takes the op's tokens plus
//! a batch (`Core::batch_tokens`: at most 64 ops, at most a quarter of a
//! slice chunk, and zero at rates whose active pool holds only a few ops,
//! where every op takes from the slices as before).
//!
//! A thread that waited and was served by hand-off (wait.rs) keeps the
//! ops it was handed beyond its need here too (`keep_extra`: whole ops only,
//! at most 512, at most the active pool), so one wake-up admits many ops.
//! A task does not: it leaves them in its thread's slice of the pool, where
//! queued waiters can reach them (`Core::leave_handoff`), and its thread
//! notes which task that was (`recipient.rs`).
//!
//! Tokens in a budget have left the pool: the ledger counts them as
//! admitted. Bounds: a thread holds at most one batch or one hand-off, for
//! one limiter at a time. It gives the budget back to the limiter's
//! central pool when it switches to another limiter and when it exits (the
//! thread-local's destructor), so nothing is lost; while a thread is idle
//! its budget (at most 512 ops, one active pool) waits for it. A
//! budget survives `restart`.
//!
//! Limiters are told apart by a unique id, never by address, so a budget
//! can never be spent on a new limiter that reuses a dropped one's memory.

use std::cell::{Cell, RefCell};

use super::core::Core;
use crate::sync::Arc;

/// Where a budget goes back to: a `Weak`, so that a budget never keeps a
/// dropped limiter alive.
#[cfg(not(tollgate_loom))]
type Home = std::sync::Weak<Core>;

/// Loom's `Arc` has no `Weak`: the model build holds the core itself. That
/// keeps a dropped limiter's core alive until the thread exits (loom drops
/// a model thread's locals when it ends, the main thread's included), and
/// changes nothing while the limiter lives, which is all a model observes.
#[cfg(tollgate_loom)]
type Home = Option<Arc<Core>>;

#[cfg(not(tollgate_loom))]
const NO_HOME: Home = std::sync::Weak::new();
#[cfg(tollgate_loom)]
const NO_HOME: Home = None;

#[cfg(not(tollgate_loom))]
fn home_of(core: &Arc<Core>) -> Home {
    Arc::downgrade(core)
}
#[cfg(tollgate_loom)]
fn home_of(core: &Arc<Core>) -> Home {
    Some(Arc::clone(core))
}

/// The limiter a budget goes back to, if it still exists.
#[cfg(not(tollgate_loom))]
fn upgrade(home: Home) -> Option<Arc<Core>> {
    home.upgrade()
}
#[cfg(tollgate_loom)]
fn upgrade(home: Home) -> Option<Arc<Core>> {
    home
}

/// The current thread's budget.
struct Local {
    /// Id of the limiter the budget belongs to (0: none).
    owner: Cell<u64>,
    /// Tokens left.
    tokens: Cell<u64>,
    /// Where to give the tokens back.
    core: RefCell<Home>,
}

impl Local {
    /// Gives the budget back to its limiter, if that still exists.
    fn give_back(&self) {
        let tokens = self.tokens.replace(0);
        self.owner.set(0);
        let core = std::mem::replace(&mut *self.core.borrow_mut(), NO_HOME);
        if tokens > 0 {
            if let Some(core) = upgrade(core) {
                core.return_tokens(tokens);
            }
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.give_back();
    }
}

crate::sync::thread_local! {
    /// The current thread's budget (one per model thread under loom).
    static LOCAL: Local = Local {
        owner: Cell::new(0),
        tokens: Cell::new(0),
        core: RefCell::new(NO_HOME),
    };
}

/// The fast paths: takes `need` tokens from the thread's budget, then from
/// its slice. `false` sends the caller to the slow path.
#[inline]
pub(crate) fn take_fast(core: &Arc<Core>, need: u64) -> bool {
    try_take(core, need) || refill(core, need)
}

/// Takes `need` tokens from the current thread's budget for `core`.
#[inline]
fn try_take(core: &Core, need: u64) -> bool {
    LOCAL
        .try_with(|local| {
            let tokens = local.tokens.get();
            if local.owner.get() == core.id() && tokens >= need {
                local.tokens.set(tokens - need);
                true
            } else {
                false
            }
        })
        .unwrap_or(false)
}

/// Keeps `tokens` handed to the current thread by a served wait (wait.rs)
/// in its budget for `core`; gives them back if the thread cannot keep them.
pub(crate) fn keep_extra(core: &Arc<Core>, tokens: u64) {
    if tokens == 0 {
        return;
    }
    let kept = LOCAL
        .try_with(|local| {
            if local.owner.get() != core.id() {
                local.give_back();
                local.owner.set(core.id());
                *local.core.borrow_mut() = home_of(core);
            }
            local.tokens.set(local.tokens.get() + tokens);
        })
        .is_ok();
    if !kept {
        core.return_extra(tokens);
    }
}

/// Takes `need` tokens from the caller's slice, and a batch more into the
/// thread's budget when the slice holds them. `false` sends the caller to
/// the slow path.
fn refill(core: &Arc<Core>, need: u64) -> bool {
    let batch = core.batch_tokens();
    if batch == 0 {
        return core.try_take_fast(need);
    }
    LOCAL
        .try_with(|local| {
            if local.owner.get() != core.id() {
                local.give_back();
                local.owner.set(core.id());
                *local.core.borrow_mut() = home_of(core);
            }
            if core.try_take_fast(need + batch) {
                local.tokens.set(local.tokens.get() + batch);
                true
            } else {
                core.try_take_fast(need)
            }
        })
        .unwrap_or_else(|_| core.try_take_fast(need))
}
