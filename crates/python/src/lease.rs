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
//!
//! Why no answer comes: a client that every configured server refused
//! with an error no retry can fix stops (`Resource::error`) and wakes the
//! resource's watch channel; `wait` and `updates` look at the stop before
//! waiting and after every wake-up, and raise ([`refused`]). Other errors
//! (a dead server, a deadline) are retried by the client, and `last_error`
//! reads them (`Client::last_error`, through `Client::watch_last_error`).

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use pyo3::exceptions::{PyStopAsyncIteration, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use tokio::sync::watch;
use tollgate_doorman::{
    Capacity, CapacitySource, Client, ClientTls, ExpiryMode, RateOptions, RateResource,
    ReleaseError, Resource, ResourceOptions, SessionError,
};

use crate::errors::{
    chain, check_address, positive_seconds, seconds, signed, tls_error, value_error, LeaseError,
};
use crate::limiter::PyStats;
use crate::repr::Repr;
use crate::runtime::{coroutine, into_asyncio, runtime, wait_on, Born};

/// Locks a mutex, whose data stays consistent even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// TLS for a `LeaseClient`: the CA that signed the servers' certificates
/// (PEM), and for mutual TLS the client's certificate and key.
///
/// The files are read and checked when the `Tls` is made: a missing one
/// raises FileNotFoundError, one without a usable PEM certificate or key
/// ValueError.
#[pyclass(frozen, name = "Tls", module = "tollgate")]
pub(crate) struct PyTls {
    tls: ClientTls,
    ca: std::path::PathBuf,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    domain: Option<String>,
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
        let mut tls = ClientTls::new(ca.clone());
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(cert.clone(), key.clone());
                Some((cert, key))
            }
            (None, None) => None,
            _ => return Err(PyValueError::new_err("cert and key go together")),
        };
        if let Some(domain) = &domain {
            if domain.is_empty() {
                return Err(PyValueError::new_err("domain must not be empty"));
            }
            tls = tls.domain(domain.clone());
        }
        tls.load().map_err(|e| tls_error(&e))?;
        Ok(PyTls {
            tls,
            ca,
            identity,
            domain,
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let path = |p: &std::path::Path| p.display().to_string();
        let mut repr = Repr::new(py, "Tls").arg(path(&self.ca))?;
        if let Some((cert, key)) = &self.identity {
            repr = repr.field("cert", path(cert))?.field("key", path(key))?;
        }
        if let Some(domain) = &self.domain {
            repr = repr.field("domain", domain)?;
        }
        repr.done()
    }
}

/// The message of the LeaseError raised once `e`, a failure no retry can
/// fix, has stopped the client.
fn refused(e: &SessionError) -> String {
    let mut text = format!("the lease server refused the client, and no retry can fix it: {e}");
    if let SessionError::Rpc { status, .. } = e {
        if status.code() == tonic::Code::Unimplemented {
            text.push_str(
                " (is it a Doorman lease server, such as `tollgate serve`, and not another \
                 kind of server?)",
            );
        }
    }
    text
}

/// Why a wait on a lease ended.
enum Woke {
    /// The capacity changed (`Err`: the resource was released).
    Changed(Result<(), watch::error::RecvError>),
    /// No lease can come: why.
    Fatal(String),
}

/// The failure that stopped the client of what `slot` holds, if one did.
fn stopped(slot: &Slot) -> Option<SessionError> {
    match &*lock(slot) {
        Some(Held::Plain(r)) => r.error(),
        Some(Held::Rate(r)) => r.resource().error(),
        None => None,
    }
}

/// Waits for the next capacity change, or until no lease can come: the
/// client's stop wakes `rx` with the capacity unchanged.
async fn next_change(rx: &mut watch::Receiver<Capacity>, slot: &Slot) -> Woke {
    if let Some(e) = stopped(slot) {
        return Woke::Fatal(refused(&e));
    }
    let changed = rx.changed().await;
    if let Some(e) = stopped(slot) {
        return Woke::Fatal(refused(&e));
    }
    Woke::Changed(changed)
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
    /// The client's last refresh error (`Client::watch_last_error`).
    errors: watch::Receiver<Option<SessionError>>,
    born: Born,
}

impl Lease {
    fn new(
        id: String,
        held: Held,
        rx: watch::Receiver<Capacity>,
        client: &Client,
        born: Born,
    ) -> Lease {
        Lease {
            id,
            slot: Arc::new(Mutex::new(Some(held))),
            seen: Mutex::new(rx.clone()),
            rx,
            errors: client.watch_last_error(),
            born,
        }
    }

    /// The client's last refresh error, as text.
    fn last_error(&self) -> PyResult<Option<String>> {
        self.born.check()?;
        Ok(self.errors.borrow().as_ref().map(ToString::to_string))
    }

    fn released(&self) -> PyErr {
        LeaseError::new_err(format!("resource {:?} was released", self.id))
    }

    fn capacity(&self) -> PyResult<f64> {
        self.born.check()?;
        Ok(self.rx.borrow().capacity)
    }

    fn current(&self) -> PyResult<PyCapacity> {
        self.born.check()?;
        Ok(PyCapacity::from(&*self.rx.borrow()))
    }

    fn set_wants(&self, wants: f64) -> PyResult<()> {
        self.born.check()?;
        let slot = lock(&self.slot);
        let got = match &*slot {
            Some(Held::Plain(r)) => r.set_wants(wants),
            Some(Held::Rate(r)) => r.set_wants(wants),
            None => return Err(self.released()),
        };
        got.map_err(|e| value_error(&e))
    }

    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyCapacity>> {
        self.born.check()?;
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let mut rx = lock(&self.seen).clone();
        let woke = wait_on(py, async {
            let next = next_change(&mut rx, &self.slot);
            match timeout {
                Some(t) => tokio::time::timeout(t, next).await.ok(),
                None => Some(next.await),
            }
        })?;
        match woke {
            None => Ok(None),
            Some(Woke::Fatal(why)) => Err(LeaseError::new_err(why)),
            Some(Woke::Changed(Err(_))) => Err(self.released()),
            Some(Woke::Changed(Ok(()))) => {
                let capacity = PyCapacity::from(&*rx.borrow_and_update());
                *lock(&self.seen) = rx;
                Ok(Some(capacity))
            }
        }
    }

    fn updates(&self) -> PyResult<PyCapacityUpdates> {
        self.born.check()?;
        let mut rx = self.rx.clone();
        rx.mark_changed();
        Ok(PyCapacityUpdates {
            watched: Arc::new(tokio::sync::Mutex::new(rx)),
            slot: Arc::clone(&self.slot),
            born: self.born,
        })
    }

    fn take(&self) -> Option<Held> {
        lock(&self.slot).take()
    }

    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.born.check()?;
        let Some(held) = self.take() else {
            return Ok(());
        };
        wait_on(py, release_held(held))?.map_err(|e| LeaseError::new_err(chain(&e)))
    }

    fn repr(&self, py: Python<'_>, what: &str) -> PyResult<String> {
        let (capacity, source) = {
            let c = self.rx.borrow();
            (c.capacity, source_name(c.source))
        };
        Repr::new(py, what)
            .arg(&self.id)?
            .field("capacity", capacity)?
            .field("source", source)?
            .done()
    }
}

/// A client of Doorman lease servers (`tollgate serve`, or Go Doorman).
///
/// `LeaseClient(["doorman:15000"])` keeps the leases of all its resources
/// fresh in the background: one bulk request per refresh interval,
/// Discovery, redirects to the master, failover between the servers, RPC
/// deadlines and backoff. `close()` (or leaving a `with` block) releases
/// every resource it still holds.
///
/// `servers` is one address (`"doorman:15000"`) or a list of them; each
/// is `host:port` (or `http://host:port`, `https://host:port`) and is
/// checked here: a bad one raises ValueError. A failed refresh is retried
/// with backoff; `wait` raises LeaseError at once when every server has
/// refused the client in a way no retry can fix (a server of another kind,
/// a refused request or certificate), and `last_error` says why the last
/// refresh failed.
///
/// A client belongs to the process that made it: in a forked child, every
/// use raises RuntimeError (its background task stayed in the parent);
/// make a new client in the child.
#[pyclass(frozen, name = "LeaseClient", module = "tollgate")]
pub(crate) struct PyLeaseClient {
    client: Mutex<Option<Client>>,
    id: String,
    servers: Vec<String>,
    born: Born,
    /// What close releases: weak, so that a resource dropped in Python
    /// is released then (in the background), not kept until close.
    slots: Mutex<Vec<Weak<Mutex<Option<Held>>>>>,
}

impl PyLeaseClient {
    fn client(&self) -> PyResult<Client> {
        self.born.check()?;
        lock(&self.client)
            .clone()
            .ok_or_else(|| LeaseError::new_err("the lease client is closed"))
    }

    fn options(
        id: &str,
        wants: f64,
        priority: &Bound<'_, PyAny>,
        expiry: &str,
    ) -> PyResult<ResourceOptions> {
        if id.is_empty() {
            // Every server refuses an empty resource id.
            return Err(PyValueError::new_err("a resource id must not be empty"));
        }
        let priority = signed("priority", priority)?;
        let mode = expiry.parse::<ExpiryMode>().map_err(|e| value_error(&e))?;
        Ok(ResourceOptions::new(wants).priority(priority).mode(mode))
    }

    /// The addresses given: one string, or a sequence of them.
    fn addresses(servers: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let servers: Vec<String> = match servers.cast::<PyString>() {
            Ok(one) => vec![one.to_cow()?.into_owned()],
            Err(_) => servers.extract().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(
                    "servers must be an address (\"host:port\") or a list of addresses",
                )
            })?,
        };
        for address in &servers {
            check_address(address)?;
        }
        Ok(servers)
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
        servers: &Bound<'_, PyAny>,
        tls: Option<PyRef<'_, PyTls>>,
        client_id: Option<String>,
        rpc_timeout: f64,
        min_refresh: f64,
    ) -> PyResult<PyLeaseClient> {
        let servers = PyLeaseClient::addresses(servers)?;
        let mut builder = Client::builder()
            .servers(servers.iter().cloned())
            .rpc_timeout(positive_seconds("rpc_timeout", rpc_timeout)?)
            .min_refresh(seconds("min_refresh", min_refresh)?);
        if let Some(id) = client_id {
            if id.is_empty() {
                return Err(PyValueError::new_err("client_id must not be empty"));
            }
            builder = builder.id(id);
        }
        if let Some(tls) = tls {
            builder = builder.tls(&tls.tls).map_err(|e| tls_error(&e))?;
        }
        let _runtime = runtime().enter();
        let client = builder.build().map_err(|e| value_error(&e))?;
        Ok(PyLeaseClient {
            id: client.id().to_owned(),
            client: Mutex::new(Some(client)),
            servers,
            born: Born::here("LeaseClient"),
            slots: Mutex::new(Vec::new()),
        })
    }

    /// Why the client's last refresh failed (the server and its error), or
    /// None when it succeeded or none has ended yet. The client retries
    /// such failures with backoff.
    #[getter]
    fn last_error(&self) -> PyResult<Option<String>> {
        let client = self.client()?;
        Ok(client.last_error().map(|e| e.to_string()))
    }

    /// The id this client sends to the servers.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// Starts asking for `wants` of resource `id` at `priority`; `expiry`
    /// ("safe", "optimistic" or "pessimistic") decides the capacity while
    /// no lease is valid.
    #[pyo3(signature = (id, wants, *, priority = None, expiry = "safe"))]
    fn resource(
        &self,
        py: Python<'_>,
        id: String,
        wants: f64,
        priority: Option<&Bound<'_, PyAny>>,
        expiry: &str,
    ) -> PyResult<PyResource> {
        let zero = 0i64.into_pyobject(py)?.into_any();
        let options = PyLeaseClient::options(&id, wants, priority.unwrap_or(&zero), expiry)?;
        let client = self.client()?;
        let resource = client
            .resource(id.clone(), options)
            .map_err(|e| value_error(&e))?;
        let rx = resource.watch();
        let lease = Lease::new(
            id,
            Held::Plain(resource),
            rx,
            &client,
            self.born.with("Resource"),
        );
        self.keep(&lease);
        Ok(PyResource { lease })
    }

    /// A rate limiter whose rate (ops/s) is the lease on resource `id`:
    /// it asks for `wants` ops/s and enforces what it is granted; a
    /// capacity of 0 makes `acquire` wait for capacity. `max_backlog`
    /// (seconds) caps how much unused time an idle limiter saves up.
    #[pyo3(signature = (id, wants, *, priority = None, expiry = "safe", max_backlog = 0.1))]
    fn rate_limiter(
        &self,
        py: Python<'_>,
        id: String,
        wants: f64,
        priority: Option<&Bound<'_, PyAny>>,
        expiry: &str,
        max_backlog: f64,
    ) -> PyResult<PyLeasedRateLimiter> {
        let zero = 0i64.into_pyobject(py)?.into_any();
        let options = RateOptions::new(PyLeaseClient::options(
            &id,
            wants,
            priority.unwrap_or(&zero),
            expiry,
        )?)
        .max_backlog(seconds("max_backlog", max_backlog)?);
        let client = self.client()?;
        let rate = {
            let _runtime = runtime().enter();
            RateResource::new(&client, id.clone(), options).map_err(|e| value_error(&e))?
        };
        let rx = rate.resource().watch();
        let born = self.born.with("LeasedRateLimiter");
        let held = Held::Rate(Arc::new(rate));
        let lease = Lease::new(id, held, rx, &client, born);
        self.keep(&lease);
        Ok(PyLeasedRateLimiter { lease })
    }

    /// Releases every resource this client still holds (waiting for the
    /// servers' answers, at most one RPC deadline each, side by side) and
    /// stops the client. A server that cannot be reached drops the leases
    /// when they expire. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.born.check()?;
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

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "LeaseClient")
            .arg(&self.servers)?
            .field("client_id", &self.id)?
            .done()
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

/// Releases; only a signal's exception (Ctrl-C) comes back.
fn quiet_release(py: Python<'_>, lease: &Lease) -> PyResult<()> {
    lease.born.check()?;
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
    watched: Arc<tokio::sync::Mutex<watch::Receiver<Capacity>>>,
    /// What the resource holds, to see whether its client stopped.
    slot: Slot,
    born: Born,
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
fn source_name(source: CapacitySource) -> &'static str {
    match source {
        CapacitySource::Pending => "pending",
        CapacitySource::Lease => "lease",
        CapacitySource::Expired => "expired",
    }
}
