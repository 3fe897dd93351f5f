//! The lease client: asks Doorman servers for capacity and keeps the leases
//! fresh, so that limiters can enforce them.
//!
//! A [`Client`] owns one background task. The task sends one bulk
//! GetCapacity for all of the client's resources, then again after the
//! smallest refresh interval among their leases; a new resource triggers a
//! round at once. It finds the master with Discovery, follows mastership
//! redirects at once, fails over between the configured server addresses,
//! puts a deadline on every RPC and backs off exponentially, with jitter,
//! after a failed round.
//!
//! Each resource publishes the capacity to enforce on a
//! [`tokio::sync::watch`] channel ([`Resource::watch`]). While a lease is
//! valid that is the lease's capacity; before the first answer, and after a
//! lease expires without renewal, the resource's [`ExpiryMode`] decides
//! (optimistic: its wants; pessimistic: 0; safe: the server's
//! `safe_capacity`). The next answer from a server ends the fallback.
//!
//! On top of the plain [`Resource`] sit [`RateResource`] (a
//! [`RateLimiter`](tollgate::RateLimiter) whose rate follows the lease),
//! [`GaugeResource`] (a cap on operations in flight) and [`LeaseLayer`] (a
//! tower layer enforcing a `RateResource` on a service).
//!
//! # Choices, and differences from the Go client
//!
//! - Every client gets its own id (`host:pid:n`); Go's share one per
//!   process.
//! - Every RPC has a deadline, and a failed RPC moves to the next address,
//!   so a dead server costs one round, and lease expiry and the expiry
//!   modes do take effect during an outage (Go retries one address
//!   forever).
//! - The refresh interval is the server's, down to one second (Go never
//!   goes below five); [`ClientBuilder::min_refresh`] raises the floor.
//! - A client holds one lease per resource id: asking twice for the same id
//!   is an error ([`ResourceError::Duplicate`]) rather than a shared,
//!   reference-counted resource; share the handle instead.
//! - An expired lease is not reported as `has`, so a server in learning
//!   mode grants such a client 0 until learning mode ends.
//! - [`ClientMetrics`] counts every RPC, its failures (a deadline passed
//!   included) and durations by server address and method, under the Go
//!   client's metric names; it is off unless given to
//!   [`ClientBuilder::metrics`].
//! - A failure that no retry can mend ([`SessionError::is_permanent`]: not
//!   a Doorman server, a request refused as invalid or too large, a
//!   certificate refused) stops the client at once, once every configured
//!   server has answered so, rather than retrying it forever:
//!   [`Client::error`] then names the cause, every [`Resource::watch`]
//!   receiver is woken, and the expiry modes govern from then on. Other
//!   failures are retried with backoff; [`Client::last_error`] names the
//!   latest, and [`Client::watch_last_error`] notifies each round's
//!   failure (the stopping one included) and the success that ends them.
//! - A round carries as many resources as the server accepts in one
//!   request: more than [`ClientBuilder::max_resources_per_request`]
//!   (default 1000), or more than [`ClientBuilder::max_request_bytes`]
//!   encoded (default 64 KiB), are split into several GetCapacity (and
//!   ReleaseCapacity) requests, made one after the other.
//! - Bad answers (NaN, infinite or negative capacity, no lease, expiry in
//!   the past, a refresh interval below the floor, unusable safe capacity,
//!   answers for unknown resources) are logged with `tracing` and refused or
//!   repaired, never trusted and never a panic.
//!
//! # Examples
//!
// The example starts a lease server to talk to.
#![cfg_attr(not(feature = "server"), doc = "```ignore")]
#![cfg_attr(feature = "server", doc = "```")]
//! use tollgate_doorman::{Client, ResourceOptions, CapacitySource};
//! # use tollgate_doorman::{Server, ServerConfig, SingleElection};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let address = listener.local_addr()?.to_string();
//! # let election = SingleElection::new(Some(address.clone()));
//! # let yaml = "resources:\n- identifier_glob: '*'\n  capacity: 1000\n  algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}\n";
//! # let server = Server::builder(ServerConfig::from_yaml(yaml)?).election(&election).build();
//! # tokio::spawn(server.serve(listener, std::future::pending()));
//! let client = Client::builder().server(address).build()?;
//! let resource = client.resource("fair", ResourceOptions::new(100.0))?;
//! let mut capacity = resource.watch();
//! capacity.wait_for(|c| c.source == CapacitySource::Lease).await?;
//! assert_eq!(resource.capacity(), 100.0);
//! resource.release().await?;
//! # Ok(())
//! # }
//! ```

mod backoff;
mod gauge;
mod layer;
mod lease;
mod metrics;
mod rate;
mod task;
mod wants;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};

use super::clock::{SystemWallClock, WallClock};
use super::transport::{self, Grpc, Transport};

pub use super::session::SessionError;
pub use backoff::Backoff;
pub use gauge::{GaugeGuard, GaugeResource};
pub use layer::{LeaseLayer, Leased, Rejected};
pub use lease::{Capacity, CapacitySource, ExpiryMode, Lease, ParseExpiryModeError};
pub use metrics::ClientMetrics;
pub use rate::{RateOptions, RateResource};
pub use wants::Smoothing;

use tollgate_service::LockUnpoisoned;
use wants::Demand;

/// Distinguishes clients created by one process.
static CLIENT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A handle on a lease client. Cheap to clone; the background task stops
/// (releasing what is left) when the last clone and the last resource are
/// dropped.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Handle>,
}

/// Dropping the last handle tells the task to stop.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.state.lock_unpoisoned().closing = true;
        self.shared.wake.notify_one();
    }
}

/// State shared between the handles and the task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) id: String,
    pub(crate) config: Config,
    pub(crate) state: Mutex<State>,
    /// Wakes the task: a resource came or went, or the client is closing.
    /// `notify_one` keeps a permit, so a wake-up sent while the task is busy
    /// is not lost.
    pub(crate) wake: Notify,
    /// The failure of the last round, if it failed ([`Client::last_error`]);
    /// only the task sends on it.
    pub(crate) last_error: watch::Sender<Option<SessionError>>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) slots: HashMap<String, Arc<Slot>>,
    pub(crate) releases: Vec<ReleaseRequest>,
    /// A resource was added: refresh now.
    pub(crate) urgent: bool,
    pub(crate) closing: bool,
    /// The permanent failure that stopped the client's refreshes.
    pub(crate) stopped: Option<SessionError>,
}

/// A queued ReleaseCapacity.
#[derive(Debug)]
pub(crate) struct ReleaseRequest {
    pub(crate) id: String,
    pub(crate) done: Option<oneshot::Sender<Result<(), ReleaseError>>>,
}

/// The client's settings.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) servers: Vec<String>,
    pub(crate) rpc_timeout: Duration,
    pub(crate) min_refresh: Duration,
    pub(crate) idle_refresh: Duration,
    pub(crate) backoff: Backoff,
    pub(crate) max_redirects: u32,
    pub(crate) max_resources_per_request: usize,
    pub(crate) max_request_bytes: usize,
    pub(crate) clock: Arc<dyn WallClock>,
    pub(crate) seed: u64,
    pub(crate) transport: Arc<dyn Transport>,
}

/// Called with each new capacity before it is published.
pub(crate) type Hook = Box<dyn Fn(f64) + Send + Sync>;

/// What wants to send for a resource.
#[derive(Debug)]
pub(crate) enum Wants {
    Fixed(f64),
    Estimated(Arc<dyn Demand>),
}

/// One resource as the task sees it.
pub(crate) struct Slot {
    pub(crate) id: String,
    pub(crate) priority: i64,
    pub(crate) mode: ExpiryMode,
    pub(crate) wants: Mutex<Wants>,
    pub(crate) tx: watch::Sender<Capacity>,
    pub(crate) hook: Option<Hook>,
    /// What the server last granted; only the task writes it.
    pub(crate) held: Mutex<task::Held>,
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("id", &self.id)
            .field("priority", &self.priority)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// The wants to send now.
    pub(crate) fn wants(&self, now: Duration) -> f64 {
        match &*self.wants.lock_unpoisoned() {
            Wants::Fixed(w) => *w,
            Wants::Estimated(d) => d.wants(now),
        }
    }
}

/// Options for one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceOptions {
    wants: f64,
    priority: i64,
    mode: ExpiryMode,
}

impl ResourceOptions {
    /// Asks for `wants` (capacity units, e.g. operations per second), at
    /// priority 0, in [`ExpiryMode::Safe`].
    pub fn new(wants: f64) -> ResourceOptions {
        ResourceOptions {
            wants,
            priority: 0,
            mode: ExpiryMode::Safe,
        }
    }

    /// The priority sent to the server (its meaning is the algorithm's).
    pub fn priority(mut self, priority: i64) -> ResourceOptions {
        self.priority = priority;
        self
    }

    /// What to do while no lease is valid.
    pub fn mode(mut self, mode: ExpiryMode) -> ResourceOptions {
        self.mode = mode;
        self
    }

    /// The wants asked for at first.
    pub fn wants(&self) -> f64 {
        self.wants
    }
}

/// Options for a [`Client`]; start with [`Client::builder`].
#[derive(Debug)]
pub struct ClientBuilder {
    servers: Vec<String>,
    id: Option<String>,
    rpc_timeout: Duration,
    min_refresh: Duration,
    idle_refresh: Duration,
    backoff: Backoff,
    max_redirects: u32,
    max_resources_per_request: usize,
    max_request_bytes: usize,
    clock: Arc<dyn WallClock>,
    transport: Option<Arc<dyn Transport>>,
    tls: Option<tonic::transport::ClientTlsConfig>,
    metrics: Option<ClientMetrics>,
    seed: Option<u64>,
}

impl ClientBuilder {
    /// Adds a server address (`host:port` or `http://host:port`). The client
    /// tries them in order, moving to the next when one fails; any of them
    /// may be a non-master that knows the master.
    pub fn server(mut self, address: impl Into<String>) -> ClientBuilder {
        self.servers.push(address.into());
        self
    }

    /// Adds several server addresses.
    pub fn servers<I, S>(mut self, addresses: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers.extend(addresses.into_iter().map(Into::into));
        self
    }

    /// The client id (default `host:pid:n`, `n` counting clients made in
    /// this process). Two clients must never share an id: the server keeps
    /// one lease per client and resource.
    pub fn id(mut self, id: impl Into<String>) -> ClientBuilder {
        self.id = Some(id.into());
        self
    }

    /// The deadline of every RPC (default 5 s).
    pub fn rpc_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.rpc_timeout = timeout;
        self
    }

    /// The shortest refresh interval the client accepts from a server
    /// (default 1 s, the smallest a server may configure).
    pub fn min_refresh(mut self, interval: Duration) -> ClientBuilder {
        self.min_refresh = interval;
        self
    }

    /// How often to ask when no resource has a lease to take an interval
    /// from (default 5 s).
    pub fn idle_refresh(mut self, interval: Duration) -> ClientBuilder {
        self.idle_refresh = interval;
        self
    }

    /// The backoff after a failed round (default: [`Backoff::default`]).
    pub fn backoff(mut self, backoff: Backoff) -> ClientBuilder {
        self.backoff = backoff;
        self
    }

    /// The most resources one request carries (default 1000, a server's
    /// default limit; at least 1). A round for more is split into several
    /// requests.
    pub fn max_resources_per_request(mut self, count: usize) -> ClientBuilder {
        self.max_resources_per_request = count.max(1);
        self
    }

    /// The largest request message, encoded, in bytes (default 64 KiB, a
    /// server's default `--max-message-bytes`). A round whose request
    /// would be larger is split into several; a single resource whose
    /// entry alone is larger is sent alone (and refused by a server with
    /// that limit).
    pub fn max_request_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_request_bytes = bytes;
        self
    }

    /// The Unix-time clock that lease expiry times are read against
    /// (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn WallClock>) -> ClientBuilder {
        self.clock = clock;
        self
    }

    /// Counts this client's RPCs, their failures and durations in
    /// `metrics`, by server address and method (default: not counted).
    pub fn metrics(mut self, metrics: ClientMetrics) -> ClientBuilder {
        self.metrics = Some(metrics);
        self
    }

    /// Dials the servers over TLS (addresses without a scheme as
    /// `https://`), trusting and presenting what `tls` names. The files are
    /// read here.
    ///
    /// # Errors
    ///
    /// [`TlsError`](tollgate_service::TlsError) naming a file that cannot be read
    /// or holds no PEM certificate or key.
    pub fn tls(
        mut self,
        tls: &tollgate_service::ClientTls,
    ) -> Result<ClientBuilder, tollgate_service::TlsError> {
        self.tls = Some(tls.load()?);
        Ok(self)
    }

    /// Carries the RPCs some other way than gRPC (the simulator's
    /// in-process servers).
    #[cfg(any(test, feature = "server"))]
    pub(crate) fn transport(mut self, transport: Arc<dyn Transport>) -> ClientBuilder {
        self.transport = Some(transport);
        self
    }

    /// Seeds the backoff's jitter (default: from the time, the process id
    /// and the client's number), so that a run can be repeated.
    #[cfg(any(test, feature = "server"))]
    pub(crate) fn seed(mut self, seed: u64) -> ClientBuilder {
        self.seed = Some(seed);
        self
    }

    /// Starts the client's task.
    ///
    /// # Errors
    ///
    /// [`ClientBuildError`] when no server is given, an address is not a valid
    /// URI, the id is empty, or there is no tokio runtime to run the task
    /// on.
    pub fn build(self) -> Result<Client, ClientBuildError> {
        if self.servers.is_empty() {
            return Err(ClientBuildError::NoServers);
        }
        let mut servers = Vec::with_capacity(self.servers.len());
        for s in self.servers {
            let uri = transport::uri(&s);
            if uri.parse::<tonic::transport::Uri>().is_err() {
                return Err(ClientBuildError::BadAddress(s));
            }
            servers.push(s);
        }
        if self.id.as_deref() == Some("") {
            return Err(ClientBuildError::EmptyId);
        }
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| ClientBuildError::NoRuntime)?;
        let n = CLIENT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let id = self
            .id
            .unwrap_or_else(|| format!("{}:{}:{n}", hostname(), std::process::id()));
        let seed = self.seed.unwrap_or_else(|| {
            self.clock.now().as_nanos() as u64 ^ (u64::from(std::process::id()) << 32) ^ n
        });
        let mut transport = self
            .transport
            .unwrap_or_else(|| Arc::new(Grpc::with_tls(self.rpc_timeout, self.tls)));
        if let Some(metrics) = self.metrics {
            transport = Arc::new(metrics::Metered {
                inner: transport,
                metrics,
            });
        }
        let shared = Arc::new(Shared {
            id,
            config: Config {
                servers,
                rpc_timeout: self.rpc_timeout,
                min_refresh: self.min_refresh.max(Duration::from_millis(1)),
                idle_refresh: self.idle_refresh.max(Duration::from_millis(1)),
                backoff: self.backoff,
                max_redirects: self.max_redirects,
                max_resources_per_request: self.max_resources_per_request,
                max_request_bytes: self.max_request_bytes,
                clock: self.clock,
                seed,
                transport,
            },
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            last_error: watch::channel(None).0,
        });
        runtime.spawn(task::run(shared.clone()));
        Ok(Client {
            inner: Arc::new(Handle { shared }),
        })
    }
}

/// This machine's host name, or `localhost`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl Client {
    /// A builder with the defaults; add at least one server.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            servers: Vec::new(),
            id: None,
            rpc_timeout: Duration::from_secs(5),
            min_refresh: Duration::from_secs(1),
            idle_refresh: Duration::from_secs(5),
            backoff: Backoff::default(),
            max_redirects: 3,
            max_resources_per_request: 1000,
            max_request_bytes: 64 * 1024,
            clock: Arc::new(SystemWallClock),
            transport: None,
            tls: None,
            metrics: None,
            seed: None,
        }
    }

    /// The id this client sends.
    pub fn id(&self) -> &str {
        &self.inner.shared.id
    }

    /// The failure that stopped this client, if one did: a failure no
    /// retry can mend ([`SessionError::is_permanent`]), answered by every
    /// configured server in turn. A stopped client makes no more refresh
    /// rounds; its resources follow their [`ExpiryMode`], and every
    /// [`Resource::watch`] receiver was woken when it stopped. Build a new
    /// client once the cause is mended.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::{Client, ResourceOptions};
    /// # use tollgate_doorman::{Server, ServerConfig, SingleElection};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let address = listener.local_addr()?.to_string();
    /// # let election = SingleElection::new(Some(address.clone()));
    /// # let server = Server::builder(ServerConfig::builtin()).election(&election).build();
    /// # tokio::spawn(server.serve(listener, std::future::pending()));
    /// // The server accepts ids of up to 1024 bytes.
    /// let client = Client::builder().server(address).id("c".repeat(2000)).build()?;
    /// let resource = client.resource("api", ResourceOptions::new(10.0))?;
    /// resource.watch().changed().await?;
    /// let error = client.error().expect("stopped");
    /// assert!(error.is_permanent());
    /// assert!(error.to_string().contains("client_id is 2000 bytes long"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn error(&self) -> Option<SessionError> {
        self.inner.shared.state.lock_unpoisoned().stopped.clone()
    }

    /// The failure of the latest refresh round (the bulk GetCapacity for
    /// all of this client's resources), if it failed: a refused connection,
    /// a deadline, or the permanent failure of [`Client::error`]. `None`
    /// before the first round ends and once a round succeeds.
    pub fn last_error(&self) -> Option<SessionError> {
        self.inner.shared.last_error.borrow().clone()
    }

    /// A receiver of [`Client::last_error`], notified after every failed
    /// round (even when the error repeats) and when a round succeeds after
    /// a failure. The round that stops the client notifies too, with
    /// [`Client::error`] already set: this is how to wait for either.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::{Client, ResourceOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1 here: the first round fails, and the
    /// // client retries it.
    /// let client = Client::builder().server("127.0.0.1:1").build()?;
    /// let mut errors = client.watch_last_error();
    /// let _r = client.resource("r", ResourceOptions::new(1.0))?;
    /// let e = errors.wait_for(Option::is_some).await?.clone().unwrap();
    /// assert_eq!(e.address(), Some("127.0.0.1:1"));
    /// assert!(!e.is_permanent());
    /// assert_eq!(client.error(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch_last_error(&self) -> watch::Receiver<Option<SessionError>> {
        self.inner.shared.last_error.subscribe()
    }

    /// Starts asking for capacity for resource `id`, with fixed wants. The
    /// first request goes out at once, with a refresh of every other
    /// resource of this client.
    ///
    /// # Errors
    ///
    /// [`ResourceError`] if this client already has a resource `id`, `id`
    /// is empty, or the wants are not a finite number `>= 0`.
    pub fn resource(
        &self,
        id: impl Into<String>,
        options: ResourceOptions,
    ) -> Result<Resource, ResourceError> {
        self.register(id.into(), options, Wants::Fixed(options.wants), None)
    }

    pub(crate) fn register(
        &self,
        id: String,
        options: ResourceOptions,
        wants: Wants,
        hook: Option<Hook>,
    ) -> Result<Resource, ResourceError> {
        check_wants(options.wants)?;
        if id.is_empty() {
            return Err(ResourceError::EmptyId);
        }
        let initial = Capacity::pending(options.mode, options.wants);
        if let Some(hook) = &hook {
            hook(initial.capacity);
        }
        let (tx, rx) = watch::channel(initial);
        let slot = Arc::new(Slot {
            id: id.clone(),
            priority: options.priority,
            mode: options.mode,
            wants: Mutex::new(wants),
            tx,
            hook,
            held: Mutex::new(task::Held::new(options.wants)),
        });
        let shared = &self.inner.shared;
        {
            let mut state = shared.state.lock_unpoisoned();
            if state.slots.contains_key(&id) {
                return Err(ResourceError::Duplicate(id));
            }
            state.slots.insert(id, slot.clone());
            state.urgent = true;
        }
        shared.wake.notify_one();
        Ok(Resource {
            client: self.clone(),
            slot,
            rx,
            registered: true,
        })
    }

    fn unregister(&self, id: &str, done: Option<oneshot::Sender<Result<(), ReleaseError>>>) {
        let shared = &self.inner.shared;
        {
            let mut state = shared.state.lock_unpoisoned();
            state.slots.remove(id);
            state.releases.push(ReleaseRequest {
                id: id.to_owned(),
                done,
            });
        }
        shared.wake.notify_one();
    }
}

fn check_wants(wants: f64) -> Result<(), ResourceError> {
    if wants.is_finite() && wants >= 0.0 {
        Ok(())
    } else {
        Err(ResourceError::BadWants(wants))
    }
}

/// A resource this client holds a lease on (or asks for one).
///
/// Dropping it releases the capacity in the background; [`release`]
/// does so and waits for the server's answer.
///
/// [`release`]: Resource::release
#[derive(Debug)]
pub struct Resource {
    client: Client,
    slot: Arc<Slot>,
    rx: watch::Receiver<Capacity>,
    registered: bool,
}

impl Resource {
    /// The resource id.
    pub fn id(&self) -> &str {
        &self.slot.id
    }

    /// The client this resource belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The capacity in force now.
    pub fn capacity(&self) -> f64 {
        self.rx.borrow().capacity
    }

    /// The failure that stopped this resource's client ([`Client::error`]).
    /// A receiver from [`Resource::watch`] is woken when the client stops,
    /// its capacity unchanged: look here after each wake-up.
    pub fn error(&self) -> Option<SessionError> {
        self.client.error()
    }

    /// The full state: capacity, its source, the last lease.
    pub fn current(&self) -> Capacity {
        self.rx.borrow().clone()
    }

    /// A receiver notified on every answer from the server and every change
    /// of source (lease expiry).
    pub fn watch(&self) -> watch::Receiver<Capacity> {
        self.rx.clone()
    }

    /// Sets the wants sent from the next refresh on (and ends any
    /// estimation).
    ///
    /// # Errors
    ///
    /// [`ResourceError::BadWants`] unless `wants` is finite and `>= 0`.
    pub fn set_wants(&self, wants: f64) -> Result<(), ResourceError> {
        check_wants(wants)?;
        *self.slot.wants.lock_unpoisoned() = Wants::Fixed(wants);
        Ok(())
    }

    /// Releases the capacity and waits for the server to acknowledge it.
    ///
    /// # Errors
    ///
    /// [`ReleaseError`] when the server could not be reached. The lease is
    /// forgotten either way; the server drops it when it expires.
    ///
    /// # Cancel safety
    ///
    /// The release is queued before the first await: cancelling only stops
    /// the waiting.
    pub async fn release(mut self) -> Result<(), ReleaseError> {
        let (tx, rx) = oneshot::channel();
        self.registered = false;
        self.client.unregister(&self.slot.id, Some(tx));
        rx.await.unwrap_or(Err(ReleaseError::Closed))
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        if self.registered {
            self.client.unregister(&self.slot.id, None);
        }
    }
}

/// Why a [`Client`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientBuildError {
    /// No server address was given.
    NoServers,
    /// An address is not a valid URI.
    BadAddress(String),
    /// Not called from within a tokio runtime.
    NoRuntime,
    /// The client id is empty, which a server refuses.
    EmptyId,
}

impl fmt::Display for ClientBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientBuildError::NoServers => f.write_str("no server address given"),
            ClientBuildError::BadAddress(a) => write!(f, "invalid server address {a:?}"),
            ClientBuildError::NoRuntime => {
                f.write_str("a lease client must be built inside a tokio runtime")
            }
            ClientBuildError::EmptyId => f.write_str("the client id is empty"),
        }
    }
}

impl std::error::Error for ClientBuildError {}

/// Why a resource could not be added or changed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResourceError {
    /// This client already has a resource with this id.
    Duplicate(String),
    /// Wants must be finite and `>= 0`.
    BadWants(f64),
    /// The resource id is empty, which a server refuses.
    EmptyId,
}

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceError::Duplicate(id) => write!(f, "this client already holds resource {id:?}"),
            ResourceError::BadWants(w) => write!(f, "wants {w} is not a finite number >= 0"),
            ResourceError::EmptyId => f.write_str("the resource id is empty"),
        }
    }
}

impl std::error::Error for ResourceError {}

/// Why a release was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseError {
    /// No server answered the ReleaseCapacity.
    Unreachable(SessionError),
    /// The client's task had stopped.
    Closed,
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::Unreachable(e) => write!(f, "release not acknowledged: {e}"),
            ReleaseError::Closed => f.write_str("the lease client has stopped"),
        }
    }
}

impl std::error::Error for ReleaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReleaseError::Unreachable(e) => Some(e),
            ReleaseError::Closed => None,
        }
    }
}
