//! The task a thread last left a hand-off for: what lets an async waiter
//! tell that it spent the ops it was handed and came back for more.
//!
//! A task served by hand-off leaves the ops beyond its need in its
//! thread's slice of the pool, where queued waiters can reach them
//! (`Core::leave_handoff`). The thread notes which task that was
//! ([`note`], by its waker and the limiter's id), so that the task's next
//! wait on the same thread finds itself noted ([`is`]): it acquires in a
//! loop (`future.rs`). Limiters are told apart by their unique id, never
//! by address.

use std::cell::RefCell;
use std::task::Waker;

crate::sync::thread_local! {
    /// The noted task: the id of the limiter that handed it ops and its
    /// waker, kept only to be compared (`Waker::will_wake`), never woken
    /// from here.
    static RECIPIENT: RefCell<Option<(u64, Waker)>> = RefCell::new(None);
}

/// Notes that the task woken by `waker` was just handed ops beyond its need
/// by the limiter `limiter`, on this thread.
pub(crate) fn note(limiter: u64, waker: &Waker) {
    let _ = RECIPIENT.try_with(|slot| {
        let mut slot = slot.borrow_mut();
        match &*slot {
            Some((id, noted)) if *id == limiter && noted.will_wake(waker) => {}
            _ => *slot = Some((limiter, waker.clone())),
        }
    });
}

/// Whether the task woken by `waker` is the last this thread left a
/// hand-off of `limiter`'s for ([`note`]): a task that waits again on the
/// thread where it was handed ops has spent them.
pub(crate) fn is(limiter: u64, waker: &Waker) -> bool {
    RECIPIENT
        .try_with(|slot| {
            slot.borrow()
                .as_ref()
                .is_some_and(|(id, noted)| *id == limiter && noted.will_wake(waker))
        })
        .unwrap_or(false)
}
