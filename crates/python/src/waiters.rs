//! The asyncio waiters of one `RateLimiter`: a FIFO driven by one task on
//! the runtime.
//!
//! # Implementation notes
//!
//! A waiter that cannot take its ops at once joins the limiter's queue
//! here rather than the core's: one task (spawned when the queue becomes
//! non-empty, ending when it empties) takes the waiters in order, each
//! with `try_acquire_n` and, when that fails, `acquire_n_async`. So the
//! core sees one async waiter per limiter, and the ops a served wait is
//! handed beyond its need (kept in the worker thread's budget) go to the
//! next waiters here at once instead of staying in a budget no other
//! waiter reaches. One wake-up of the task completes as many waiters as
//! the fill allows; their results reach the event loop in one batch
//! (runtime.rs).
//!
//! A cancelled waiter is skipped when it comes up; the one being waited
//! for leaves the core's queue at once (its notify), and the core's future
//! gives back what it gathered, so a cancelled acquire takes nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tokio::sync::Notify;
use tollgate::RateLimiter;

use crate::runtime::{runtime, Completion};

/// A waiter's cancellation, set from its asyncio future's done callback.
#[derive(Default)]
struct Cancel {
    /// Relaxed: read by the driver before it starts on the waiter; the
    /// notify wakes it if it already has.
    cancelled: AtomicBool,
    notify: Notify,
}

/// Marks a waiter cancelled when its asyncio future was cancelled.
#[pyclass(frozen)]
struct CancelOnDone(Arc<Cancel>);

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.0.cancelled.store(true, Ordering::Relaxed);
            self.0.notify.notify_one();
        }
        Ok(())
    }
}

struct Waiter {
    n: u64,
    completion: Completion,
    cancel: Arc<Cancel>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    /// Whether a driver task is running (it empties the queue before it
    /// stops, under the lock).
    driving: bool,
}

/// The asyncio waiters of one limiter.
#[derive(Default)]
pub(crate) struct AsyncWaiters {
    queue: Mutex<Queue>,
}

impl AsyncWaiters {
    /// Queues an asyncio future for `n` ops of `limiter`, resolving to the
    /// lateness in seconds.
    pub(crate) fn wait<'py>(
        self: &Arc<Self>,
        py: Python<'py>,
        limiter: &Arc<RateLimiter>,
        n: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (completion, py_fut) = Completion::new(py)?;
        let cancel = Arc::new(Cancel::default());
        py_fut.call_method1("add_done_callback", (CancelOnDone(Arc::clone(&cancel)),))?;
        let start = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.waiters.push_back(Waiter {
                n,
                completion,
                cancel,
            });
            !std::mem::replace(&mut q.driving, true)
        };
        if start {
            runtime().spawn(drive(Arc::clone(limiter), Arc::clone(self)));
        }
        Ok(py_fut)
    }

    /// The next waiter, or `None` (and the driver stops) when none is left.
    fn next(&self) -> Option<Waiter> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let next = q.waiters.pop_front();
        if next.is_none() {
            q.driving = false;
        }
        next
    }
}

/// Serves the queue in order until it is empty.
async fn drive(limiter: Arc<RateLimiter>, waiters: Arc<AsyncWaiters>) {
    while let Some(w) = waiters.next() {
        if w.cancel.cancelled.load(Ordering::Relaxed) {
            continue;
        }
        let late = if limiter.try_acquire_n(w.n) {
            limiter.lateness()
        } else {
            tokio::select! {
                biased;
                () = w.cancel.notify.notified() => continue,
                late = limiter.acquire_n_async(w.n) => late,
            }
        };
        w.completion.complete(late.as_secs_f64(), |py, late| {
            Ok(late.into_pyobject(py)?.into_any().unbind())
        });
    }
}
