//! The future behind [`RateLimiter::acquire_n_async`](crate::RateLimiter::acquire_n_async).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::core::Core;

/// Waits for tokens without blocking a thread; resolves to how late the op
/// starts versus its schedule slot.
///
/// # Cancel safety
///
/// Dropping the future before it resolves loses no tokens: whatever it had
/// gathered returns to the pool, and a wake-up meant for it is handed on.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct AcquireFuture<'a> {
    core: &'a Core,
    need: u64,
    held: u64,
    id: Option<u64>,
    done: bool,
}

impl<'a> AcquireFuture<'a> {
    pub(crate) fn new(core: &'a Core, need: u64) -> AcquireFuture<'a> {
        AcquireFuture {
            core,
            need,
            held: 0,
            id: None,
            done: need == 0,
        }
    }
}

impl Future for AcquireFuture<'_> {
    type Output = Duration;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Duration> {
        let this = self.get_mut();
        if this.done
            || this.core.try_take_fast(this.need)
            || this
                .core
                .poll_acquire(this.need, &mut this.held, &mut this.id, cx.waker())
        {
            this.done = true;
            return Poll::Ready(this.core.lateness());
        }
        Poll::Pending
    }
}

impl Drop for AcquireFuture<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.core.cancel_acquire(self.held, self.id.take());
        }
    }
}
