//! `LeasedRateLimiter`: a rate limiter whose rate is a lease's capacity.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use tollgate_doorman::RateResource;

use crate::errors::{chain, seconds};
use crate::limiter::PyStats;
use crate::runtime::{coroutine, into_asyncio, wait_on};

use super::{lock, quiet_release, Held, Lease, PyCapacity, PyCapacityUpdates};

/// A rate limiter fed by a lease: its rate (ops/s) is the capacity the
/// lease server grants, and follows every refresh and expiry.
#[pyclass(frozen, name = "LeasedRateLimiter", module = "tollgate")]
pub(crate) struct PyLeasedRateLimiter {
    pub(super) lease: Lease,
}

impl PyLeasedRateLimiter {
    fn rate(&self) -> PyResult<Arc<RateResource>> {
        self.lease.born.check()?;
        match &*lock(&self.lease.slot) {
            Some(Held::Rate(r)) => Ok(Arc::clone(r)),
            _ => Err(self.lease.released()),
        }
    }
}

#[pymethods]
impl PyLeasedRateLimiter {
    /// The resource id.
    #[getter]
    fn id(&self) -> &str {
        &self.lease.id
    }

    /// Blocks until one op may start, the GIL released, waiting for
    /// capacity while the lease grants none; returns the lateness in
    /// seconds. Ctrl-C raises KeyboardInterrupt and takes nothing.
    fn acquire(&self, py: Python<'_>) -> PyResult<f64> {
        let rate = self.rate()?;
        if rate.try_acquire() {
            return Ok(rate.limiter().lateness().as_secs_f64());
        }
        let late = wait_on(py, async move { rate.acquire().await })?;
        Ok(late.as_secs_f64())
    }

    /// Takes one op if the lease allows it now; never waits.
    fn try_acquire(&self) -> PyResult<bool> {
        Ok(self.rate()?.try_acquire())
    }

    /// Like `acquire`, waiting at most `timeout` seconds; raises
    /// TimeoutError (taking nothing) when no capacity came in time.
    fn acquire_timeout(&self, py: Python<'_>, timeout: f64) -> PyResult<f64> {
        let max_wait = seconds("timeout", timeout)?;
        let rate = self.rate()?;
        let got = wait_on(py, async move { rate.acquire_timeout(max_wait).await })?;
        got.map(|late| late.as_secs_f64()).map_err(|e| {
            let mut text = chain(&e);
            if let Some(why) = &*self.lease.errors.borrow() {
                text.push_str(&format!(" (the last refresh failed: {why})"));
            }
            PyTimeoutError::new_err(text)
        })
    }

    /// A coroutine that waits for one op without blocking the event loop
    /// and returns the lateness in seconds. It starts when first awaited
    /// (or run as a task); cancelling it takes nothing.
    fn acquire_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().rate()?;
        coroutine(slf.py(), "acquire_leased", (slf,))
    }

    /// What `acquire_async`'s coroutine runs first: the lateness when an
    /// op is there, else an asyncio future of it.
    fn _acquire_start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rate = self.rate()?;
        if rate.try_acquire() {
            let late = rate.limiter().lateness().as_secs_f64();
            return Ok(late.into_pyobject(py)?.into_any());
        }
        into_asyncio(
            py,
            async move { rate.acquire().await },
            |py, late: Duration| Ok(late.as_secs_f64().into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// The capacity in force, ops per second.
    #[getter]
    fn capacity(&self) -> PyResult<f64> {
        self.lease.capacity()
    }

    /// The whole lease state.
    fn current(&self) -> PyResult<PyCapacity> {
        self.lease.current()
    }

    /// Why the client's last refresh failed, or None (see
    /// `LeaseClient.last_error`).
    #[getter]
    fn last_error(&self) -> PyResult<Option<String>> {
        self.lease.last_error()
    }

    /// Sets the wants (ops/s) sent from the next refresh on.
    fn set_wants(&self, wants: f64) -> PyResult<()> {
        self.lease.set_wants(wants)
    }

    /// The limiter's counters.
    fn stats(&self) -> PyResult<PyStats> {
        let s = self.rate()?.limiter().stats();
        Ok(PyStats::new(s))
    }

    /// Blocks until the lease state changes and returns it; None after
    /// `timeout` seconds without a change. Raises LeaseError as
    /// `Resource.wait` does.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        self.lease.wait(py, timeout)
    }

    /// An async iterator of the lease state: the current one first, then
    /// each change.
    fn updates(&self) -> PyResult<PyCapacityUpdates> {
        self.lease.updates()
    }

    /// Releases the lease and waits for the server's answer; raises
    /// LeaseError when no server acknowledged it.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.lease.release(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        quiet_release(py, &self.lease)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.lease.repr(py, "LeasedRateLimiter")
    }
}
