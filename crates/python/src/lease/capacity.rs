//! `Capacity`, a resource's state at one moment, and `CapacityUpdates`,
//! the async iterator of its changes.

use std::sync::Arc;

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use tokio::sync::watch;
use tollgate_doorman::{Capacity, CapacitySource};

use crate::errors::LeaseError;
use crate::repr::Repr;
use crate::runtime::{into_asyncio, Born};

use super::{next_change, Slot, Woke};

/// A resource's capacity state at one moment.
#[pyclass(frozen, get_all, name = "Capacity", module = "tollgate")]
pub(crate) struct PyCapacity {
    /// The capacity to use now.
    capacity: f64,
    /// Why: "pending" (no answer yet), "lease" or "expired".
    source: String,
    /// The last lease's capacity, if any (even expired).
    lease_capacity: Option<f64>,
    /// When the last lease expires (Unix time, seconds).
    expiry: Option<f64>,
    /// How often the server asks to be asked again, seconds.
    refresh_interval: Option<f64>,
    /// The last safe capacity the server sent.
    safe_capacity: Option<f64>,
    /// How many answers from the server the resource has had.
    refreshes: u64,
}

impl From<&Capacity> for PyCapacity {
    fn from(c: &Capacity) -> PyCapacity {
        PyCapacity {
            capacity: c.capacity,
            source: source_name(c.source).to_owned(),
            lease_capacity: c.lease.map(|l| l.capacity),
            expiry: c.lease.map(|l| l.expiry.as_secs_f64()),
            refresh_interval: c.lease.map(|l| l.refresh_interval.as_secs_f64()),
            safe_capacity: c.safe_capacity,
            refreshes: c.refreshes,
        }
    }
}

#[pymethods]
impl PyCapacity {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "Capacity")
            .field("capacity", self.capacity)?
            .field("source", &self.source)?
            .field("lease_capacity", self.lease_capacity)?
            .field("expiry", self.expiry)?
            .field("refresh_interval", self.refresh_interval)?
            .field("safe_capacity", self.safe_capacity)?
            .field("refreshes", self.refreshes)?
            .done()
    }
}

/// `async for capacity in resource.updates()`: the state now, then every
/// change, until the resource is released.
#[pyclass(frozen, name = "CapacityUpdates", module = "tollgate")]
pub(crate) struct PyCapacityUpdates {
    /// The capacity.
    pub(super) watched: Arc<tokio::sync::Mutex<watch::Receiver<Capacity>>>,
    /// What the resource holds, to see whether its client stopped.
    pub(super) slot: Slot,
    pub(super) born: Born,
}

#[pymethods]
impl PyCapacityUpdates {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.born.check()?;
        let watched = Arc::clone(&self.watched);
        let slot = Arc::clone(&self.slot);
        into_asyncio(
            py,
            async move {
                let mut watched = watched.lock().await;
                let rx = &mut *watched;
                match next_change(rx, &slot).await {
                    Woke::Changed(Ok(())) => Ok(Some(PyCapacity::from(&*rx.borrow_and_update()))),
                    Woke::Changed(Err(_released)) => Ok(None),
                    Woke::Fatal(e) => Err(e),
                }
            },
            |py, next| match next {
                Ok(Some(c)) => Ok(Py::new(py, c)?.into_any()),
                Ok(None) => Err(PyStopAsyncIteration::new_err(())),
                Err(why) => Err(LeaseError::new_err(why)),
            },
        )
    }
}

/// A capacity source's name in Python.
pub(super) fn source_name(source: CapacitySource) -> &'static str {
    match source {
        CapacitySource::Pending => "pending",
        CapacitySource::Lease => "lease",
        CapacitySource::Expired => "expired",
    }
}
