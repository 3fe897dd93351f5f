//! The future behind [`RateLimiter::acquire_n_async`](crate::RateLimiter::acquire_n_async).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::budget::take_fast;
use super::core::Core;
use super::recipient;
use super::wait::Waiter;
use crate::sync::Arc;

/// Waits for tokens without blocking a thread; resolves to how late the op
/// starts versus its schedule slot.
///
/// A pending future is one node in the limiter's wait queue, woken when
/// its tokens have been handed to it; polling it then does not touch any
/// lock other waiters share. A task served with more ops than it needs
/// keeps the rest for its own next acquires, which take them first without
/// waiting: one wake-up admits many ops to a task acquiring in a loop. The
/// first time a task is served that way, the task behind it is woken too,
/// to take what the first leaves (all but one op, if the first took one
/// and ended); a task that comes back to wait after spending its ops
/// acquires in a loop, and its later grants wake no one else: what it
/// leaves, if it stops, is served to the queue by the next fill.
///
/// # Cancel safety
///
/// Dropping the future before it resolves loses no tokens: whatever it had
/// gathered, or was handed by a grant that raced the drop, returns to the
/// pool and serves the next waiter.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct AcquireFuture<'a> {
    core: &'a Arc<Core>,
    need: u64,
    held: u64,
    node: Option<std::sync::Arc<Waiter>>,
    done: bool,
    /// Whether the task queued after spending a hand-off its thread left
    /// for it (`recipient::is`): it acquires in a loop.
    looping: bool,
}

impl<'a> AcquireFuture<'a> {
    pub(crate) fn new(core: &'a Arc<Core>, need: u64) -> AcquireFuture<'a> {
        AcquireFuture {
            core,
            need,
            held: 0,
            node: None,
            done: need == 0,
            looping: false,
        }
    }
}

impl Future for AcquireFuture<'_> {
    type Output = Duration;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Duration> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(this.core.lateness());
        }
        if this.node.is_none() && take_fast(this.core, this.need) {
            this.done = true;
            return Poll::Ready(this.core.lateness());
        }
        let queued = this.node.is_some();
        match this
            .core
            .poll_acquire(this.need, &mut this.held, &mut this.node, cx.waker())
        {
            Some(extra) => {
                this.done = true;
                // A task is not a thread: the next acquire on this thread
                // may never come, while queued tasks wait for these tokens.
                // They stay in the pool, where this thread takes them first
                // and the queue takes what it leaves.
                this.core.leave_handoff(extra, this.looping, cx.waker());
                Poll::Ready(this.core.lateness())
            }
            None => {
                if !queued {
                    this.looping = recipient::is(this.core.id(), cx.waker());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for AcquireFuture<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.core.cancel_acquire(self.held, self.node.take());
        }
    }
}
