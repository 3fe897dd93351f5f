//! `Resource`: a lease's capacity, read, awaited and released from
//! Python.

use pyo3::prelude::*;

use super::{quiet_release, Lease, PyCapacity, PyCapacityUpdates};

/// A resource the client holds a lease on: `capacity` is what to use now
/// (the lease's, or the expiry mode's while no lease is valid).
#[pyclass(frozen, name = "Resource", module = "tollgate")]
pub(crate) struct PyResource {
    pub(super) lease: Lease,
}

#[pymethods]
impl PyResource {
    /// The resource id.
    #[getter]
    fn id(&self) -> &str {
        &self.lease.id
    }

    /// The capacity to use now.
    #[getter]
    fn capacity(&self) -> PyResult<f64> {
        self.lease.capacity()
    }

    /// The whole state: capacity, its source, the last lease.
    fn current(&self) -> PyResult<PyCapacity> {
        self.lease.current()
    }

    /// Why the client's last refresh failed, or None (see
    /// `LeaseClient.last_error`).
    #[getter]
    fn last_error(&self) -> PyResult<Option<String>> {
        self.lease.last_error()
    }

    /// Sets the wants sent from the next refresh on.
    fn set_wants(&self, wants: f64) -> PyResult<()> {
        self.lease.set_wants(wants)
    }

    /// Blocks until the capacity state changes (an answer from a server,
    /// a lease expiring) and returns it; None after `timeout` seconds
    /// without a change (`last_error` then says whether the servers are
    /// failing, and why). Raises LeaseError at once when every server of
    /// the client has refused it in a way no retry can fix (a server of
    /// another kind, a refused request, a TLS certificate that does not
    /// verify).
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        self.lease.wait(py, timeout)
    }

    /// An async iterator of the capacity state: the current one first,
    /// then each change; it ends when the resource is released, and
    /// raises LeaseError as `wait` does.
    fn updates(&self) -> PyResult<PyCapacityUpdates> {
        self.lease.updates()
    }

    /// Releases the lease and waits for the server's answer; raises
    /// LeaseError when no server acknowledged it (the server then drops
    /// the lease when it expires). Releasing twice does nothing.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.lease.release(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases, without raising when no server can be reached.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        quiet_release(py, &self.lease)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.lease.repr(py, "Resource")
    }
}
