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

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use tokio::sync::watch;
use tollgate_doorman::{
    Capacity, Client, ExpiryMode, RateOptions, RateResource, ReleaseError, Resource,
    ResourceOptions, SessionError,
};

use crate::errors::{
    chain, check_address, positive_seconds, seconds, signed, tls_error, value_error, LeaseError,
};
use crate::repr::Repr;
use crate::runtime::{runtime, wait_on, Born};

mod capacity;
mod limiter;
mod resource;
mod tls;

use capacity::source_name;
pub(crate) use capacity::{PyCapacity, PyCapacityUpdates};
pub(crate) use limiter::PyLeasedRateLimiter;
pub(crate) use resource::PyResource;
pub(crate) use tls::PyTls;

/// Locks a mutex, whose data stays consistent even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

/// Releases; only a signal's exception (Ctrl-C) comes back.
fn quiet_release(py: Python<'_>, lease: &Lease) -> PyResult<()> {
    lease.born.check()?;
    if let Some(held) = lease.take() {
        let _unacknowledged = wait_on(py, release_held(held))?;
    }
    Ok(())
}
