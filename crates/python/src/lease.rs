//! `LeaseClient` and what it hands out: `Resource` (a lease's capacity),
//! `LeasedRateLimiter` (a limiter whose rate is the lease), `Capacity` and
//! the async iterator of capacity updates.
//!
//! # Implementation notes
//!
//! A resource lives in a slot owned by its Python object, which the client
//! knows weakly, so that `LeaseClient.close()` can release whatever its
//! resources still hold, and a resource dropped in Python is released at
//! once in the background; releasing takes it out of the slot, and every
//! later use raises `LeaseError`. The capacity is read from the resource's watch channel
//! without a lock. A limiter's acquires clone its `Arc<RateResource>` out
//! of the slot for the time they wait, so a release while they wait
//! releases in the background once they are done.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use pyo3::exceptions::{PyStopAsyncIteration, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use tokio::sync::watch;
use tollgate_doorman::{
    Capacity, CapacitySource, Client, ClientTls, ExpiryMode, RateOptions, RateResource,
    ReleaseError, Resource, ResourceOptions,
};

use crate::errors::{chain, seconds, value_error, LeaseError};
use crate::limiter::PyStats;
use crate::runtime::{into_asyncio, runtime, wait_on, Ready};

/// Locks a mutex, whose data stays consistent even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// TLS for a `LeaseClient`: the CA that signed the servers' certificates
/// (PEM), and for mutual TLS the client's certificate and key.
#[pyclass(frozen, name = "Tls", module = "tollgate")]
pub(crate) struct PyTls {
    tls: ClientTls,
}

#[pymethods]
impl PyTls {
    #[new]
    #[pyo3(signature = (ca, *, cert = None, key = None, domain = None))]
    fn new(
        ca: std::path::PathBuf,
        cert: Option<std::path::PathBuf>,
        key: Option<std::path::PathBuf>,
        domain: Option<String>,
    ) -> PyResult<PyTls> {
        let mut tls = ClientTls::new(ca);
        match (cert, key) {
            (Some(cert), Some(key)) => tls = tls.identity(cert, key),
            (None, None) => {}
            _ => return Err(PyValueError::new_err("cert and key go together")),
        }
        if let Some(domain) = domain {
            tls = tls.domain(domain);
        }
        Ok(PyTls { tls })
    }

    fn __repr__(&self) -> String {
        format!("Tls({:?})", self.tls)
    }
}

/// What a slot holds until it is released.
enum Held {
    Plain(Resource),
    Rate(Arc<RateResource>),
}

type Slot = Arc<Mutex<Option<Held>>>;

/// Releases what a slot held and waits for the server's answer (a limiter
/// still in use by a waiting acquire is released once that is done).
async fn release_held(held: Held) -> Result<(), ReleaseError> {
    match held {
        Held::Plain(r) => r.release().await,
        Held::Rate(r) => match Arc::try_unwrap(r) {
            Ok(r) => r.release().await,
            Err(_still_waited_on) => Ok(()),
        },
    }
}

/// The parts a resource and a leased limiter share.
struct Lease {
    id: String,
    slot: Slot,
    rx: watch::Receiver<Capacity>,
    /// The version `wait` last returned.
    seen: Mutex<watch::Receiver<Capacity>>,
}

impl Lease {
    fn new(id: String, held: Held, rx: watch::Receiver<Capacity>) -> Lease {
        Lease {
            id,
            slot: Arc::new(Mutex::new(Some(held))),
            seen: Mutex::new(rx.clone()),
            rx,
        }
    }

    fn released(&self) -> PyErr {
        LeaseError::new_err(format!("resource {:?} was released", self.id))
    }

    fn capacity(&self) -> f64 {
        self.rx.borrow().capacity
    }

    fn current(&self) -> PyCapacity {
        PyCapacity::from(&*self.rx.borrow())
    }

    fn set_wants(&self, wants: f64) -> PyResult<()> {
        let slot = lock(&self.slot);
        let got = match &*slot {
            Some(Held::Plain(r)) => r.set_wants(wants),
            Some(Held::Rate(r)) => r.set_wants(wants),
            None => return Err(self.released()),
        };
        got.map_err(|e| value_error(&e))
    }

    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let mut rx = lock(&self.seen).clone();
        let changed = wait_on(py, async {
            match timeout {
                Some(t) => tokio::time::timeout(t, rx.changed()).await.ok(),
                None => Some(rx.changed().await),
            }
        })?;
        match changed {
            None => Ok(None),
            Some(Err(_)) => Err(self.released()),
            Some(Ok(())) => {
                let capacity = PyCapacity::from(&*rx.borrow_and_update());
                *lock(&self.seen) = rx;
                Ok(Some(capacity))
            }
        }
    }

    fn updates(&self) -> PyCapacityUpdates {
        let mut rx = self.rx.clone();
        rx.mark_changed();
        PyCapacityUpdates {
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
        }
    }

    fn take(&self) -> Option<Held> {
        lock(&self.slot).take()
    }

    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(held) = self.take() else {
            return Ok(());
        };
        wait_on(py, release_held(held))?.map_err(|e| LeaseError::new_err(chain(&e)))
    }

    fn repr(&self, what: &str) -> String {
        let c = self.rx.borrow();
        format!(
            "{what}({:?}, capacity={}, source={:?})",
            self.id,
            c.capacity,
            c.source.to_string()
        )
    }
}

/// A client of Doorman lease servers (`tollgate serve`, or Go Doorman).
///
/// `LeaseClient(["doorman:15000"])` keeps the leases of all its resources
/// fresh in the background: one bulk request per refresh interval,
/// Discovery, redirects to the master, failover between the servers, RPC
/// deadlines and backoff. `close()` (or leaving a `with` block) releases
/// every resource it still holds.
#[pyclass(frozen, name = "LeaseClient", module = "tollgate")]
pub(crate) struct PyLeaseClient {
    client: Mutex<Option<Client>>,
    id: String,
    /// What close releases: weak, so that a resource dropped in Python
    /// is released then (in the background), not kept until close.
    slots: Mutex<Vec<Weak<Mutex<Option<Held>>>>>,
}

impl PyLeaseClient {
    fn client(&self) -> PyResult<Client> {
        lock(&self.client)
            .clone()
            .ok_or_else(|| LeaseError::new_err("the lease client is closed"))
    }

    fn options(wants: f64, priority: i64, expiry: &str) -> PyResult<ResourceOptions> {
        let mode = expiry.parse::<ExpiryMode>().map_err(|e| value_error(&e))?;
        Ok(ResourceOptions::new(wants).priority(priority).mode(mode))
    }

    fn keep(&self, lease: &Lease) {
        let mut slots = lock(&self.slots);
        slots.retain(|s| s.upgrade().is_some_and(|s| lock(&s).is_some()));
        slots.push(Arc::downgrade(&lease.slot));
    }
}

#[pymethods]
impl PyLeaseClient {
    #[new]
    #[pyo3(signature = (servers, *, tls = None, client_id = None, rpc_timeout = 5.0, min_refresh = 1.0))]
    fn new(
        servers: Vec<String>,
        tls: Option<PyRef<'_, PyTls>>,
        client_id: Option<String>,
        rpc_timeout: f64,
        min_refresh: f64,
    ) -> PyResult<PyLeaseClient> {
        let mut builder = Client::builder()
            .servers(servers)
            .rpc_timeout(seconds("rpc_timeout", rpc_timeout)?)
            .min_refresh(seconds("min_refresh", min_refresh)?);
        if let Some(id) = client_id {
            builder = builder.id(id);
        }
        if let Some(tls) = tls {
            builder = builder
                .tls(&tls.tls)
                .map_err(|e| LeaseError::new_err(chain(&e)))?;
        }
        let _runtime = runtime().enter();
        let client = builder.build().map_err(|e| value_error(&e))?;
        Ok(PyLeaseClient {
            id: client.id().to_owned(),
            client: Mutex::new(Some(client)),
            slots: Mutex::new(Vec::new()),
        })
    }

    /// The id this client sends to the servers.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// Starts asking for `wants` of resource `id` at `priority`; `expiry`
    /// ("safe", "optimistic" or "pessimistic") decides the capacity while
    /// no lease is valid.
    #[pyo3(signature = (id, wants, *, priority = 0, expiry = "safe"))]
    fn resource(
        &self,
        id: String,
        wants: f64,
        priority: i64,
        expiry: &str,
    ) -> PyResult<PyResource> {
        let options = PyLeaseClient::options(wants, priority, expiry)?;
        let resource = self
            .client()?
            .resource(id.clone(), options)
            .map_err(|e| value_error(&e))?;
        let rx = resource.watch();
        let lease = Lease::new(id, Held::Plain(resource), rx);
        self.keep(&lease);
        Ok(PyResource { lease })
    }

    /// A rate limiter whose rate (ops/s) is the lease on resource `id`:
    /// it asks for `wants` ops/s and enforces what it is granted; a
    /// capacity of 0 makes `acquire` wait for capacity. `max_backlog`
    /// (seconds) caps how much unused time an idle limiter saves up.
    #[pyo3(signature = (id, wants, *, priority = 0, expiry = "safe", max_backlog = 0.1))]
    fn rate_limiter(
        &self,
        id: String,
        wants: f64,
        priority: i64,
        expiry: &str,
        max_backlog: f64,
    ) -> PyResult<PyLeasedRateLimiter> {
        let options = RateOptions::new(PyLeaseClient::options(wants, priority, expiry)?)
            .max_backlog(seconds("max_backlog", max_backlog)?);
        let client = self.client()?;
        let rate = {
            let _runtime = runtime().enter();
            RateResource::new(&client, id.clone(), options).map_err(|e| value_error(&e))?
        };
        let rx = rate.resource().watch();
        let lease = Lease::new(id, Held::Rate(Arc::new(rate)), rx);
        self.keep(&lease);
        Ok(PyLeasedRateLimiter { lease })
    }

    /// Releases every resource this client still holds (waiting for the
    /// servers' answers, at most one RPC deadline each, side by side) and
    /// stops the client. A server that cannot be reached drops the leases
    /// when they expire. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let held: Vec<Held> = lock(&self.slots)
            .drain(..)
            .filter_map(|s| s.upgrade().and_then(|s| lock(&s).take()))
            .collect();
        let releases: Vec<_> = {
            let _runtime = runtime().enter();
            held.into_iter()
                .map(|h| tokio::spawn(release_held(h)))
                .collect()
        };
        wait_on(py, async {
            for r in releases {
                let _ = r.await;
            }
        })?;
        lock(&self.client).take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("LeaseClient(id={:?})", self.id)
    }
}

/// A resource the client holds a lease on: `capacity` is what to use now
/// (the lease's, or the expiry mode's while no lease is valid).
#[pyclass(frozen, name = "Resource", module = "tollgate")]
pub(crate) struct PyResource {
    lease: Lease,
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
    fn capacity(&self) -> f64 {
        self.lease.capacity()
    }

    /// The whole state: capacity, its source, the last lease.
    fn current(&self) -> PyCapacity {
        self.lease.current()
    }

    /// Sets the wants sent from the next refresh on.
    fn set_wants(&self, wants: f64) -> PyResult<()> {
        self.lease.set_wants(wants)
    }

    /// Blocks until the capacity state changes (an answer from a server,
    /// a lease expiring) and returns it; None after `timeout` seconds.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        self.lease.wait(py, timeout)
    }

    /// An async iterator of the capacity state: the current one first,
    /// then each change; it ends when the resource is released.
    fn updates(&self) -> PyCapacityUpdates {
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

    fn __repr__(&self) -> String {
        self.lease.repr("Resource")
    }
}

/// Releases; only a signal's exception (Ctrl-C) comes back.
fn quiet_release(py: Python<'_>, lease: &Lease) -> PyResult<()> {
    if let Some(held) = lease.take() {
        let _unacknowledged = wait_on(py, release_held(held))?;
    }
    Ok(())
}

/// A rate limiter fed by a lease: its rate (ops/s) is the capacity the
/// lease server grants, and follows every refresh and expiry.
#[pyclass(frozen, name = "LeasedRateLimiter", module = "tollgate")]
pub(crate) struct PyLeasedRateLimiter {
    lease: Lease,
}

impl PyLeasedRateLimiter {
    fn rate(&self) -> PyResult<Arc<RateResource>> {
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
        got.map(|late| late.as_secs_f64())
            .map_err(|e| PyTimeoutError::new_err(chain(&e)))
    }

    /// Waits for one op without blocking the event loop; resolves to the
    /// lateness in seconds. Cancelling it takes nothing.
    fn acquire_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rate = self.rate()?;
        if rate.try_acquire() {
            let ready = Ready::new(py, rate.limiter().lateness().as_secs_f64())?;
            return Ok(Bound::new(py, ready)?.into_any());
        }
        into_asyncio(
            py,
            async move { rate.acquire().await },
            |py, late: Duration| Ok(late.as_secs_f64().into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// The capacity in force, ops per second.
    #[getter]
    fn capacity(&self) -> f64 {
        self.lease.capacity()
    }

    /// The whole lease state.
    fn current(&self) -> PyCapacity {
        self.lease.current()
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
    /// `timeout` seconds.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        self.lease.wait(py, timeout)
    }

    /// An async iterator of the lease state: the current one first, then
    /// each change.
    fn updates(&self) -> PyCapacityUpdates {
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

    fn __repr__(&self) -> String {
        self.lease.repr("LeasedRateLimiter")
    }
}

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
            source: match c.source {
                CapacitySource::Pending => "pending",
                CapacitySource::Lease => "lease",
                CapacitySource::Expired => "expired",
            }
            .to_owned(),
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
    fn __repr__(&self) -> String {
        format!(
            "Capacity(capacity={}, source={:?}, lease_capacity={:?}, expiry={:?}, refreshes={})",
            self.capacity, self.source, self.lease_capacity, self.expiry, self.refreshes
        )
    }
}

/// `async for capacity in resource.updates()`: the state now, then every
/// change, until the resource is released.
#[pyclass(frozen, name = "CapacityUpdates", module = "tollgate")]
pub(crate) struct PyCapacityUpdates {
    rx: Arc<tokio::sync::Mutex<watch::Receiver<Capacity>>>,
}

#[pymethods]
impl PyCapacityUpdates {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rx = Arc::clone(&self.rx);
        into_asyncio(
            py,
            async move {
                let mut rx = rx.lock().await;
                match rx.changed().await {
                    Ok(()) => Some(PyCapacity::from(&*rx.borrow_and_update())),
                    Err(_) => None,
                }
            },
            |py, next| match next {
                Some(c) => Ok(Py::new(py, c)?.into_any()),
                None => Err(PyStopAsyncIteration::new_err(())),
            },
        )
    }
}
