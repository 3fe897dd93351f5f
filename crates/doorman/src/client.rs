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
mod builder;
mod gauge;
mod layer;
mod lease;
mod metrics;
mod rate;
mod resource;
mod task;
mod wants;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};

use crate::clock::WallClock;
use crate::transport::Transport;

pub use crate::lease::Lease;
pub use crate::session::SessionError;
pub use backoff::Backoff;
pub use builder::{ClientBuildError, ClientBuilder};
pub use gauge::{GaugeGuard, GaugeResource};
pub use layer::{LeaseLayer, Leased, Rejected};
pub use lease::{Capacity, CapacitySource, ExpiryMode, ParseExpiryModeError};
pub use metrics::ClientMetrics;
pub use rate::{RateOptions, RateResource};
pub use resource::{ReleaseError, Resource, ResourceError, ResourceOptions};
pub use wants::Smoothing;

use resource::check_wants;
use tollgate_service::LockUnpoisoned;
use wants::WantsEstimate;

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
    pub(crate) releases: Vec<PendingRelease>,
    /// A resource was added: refresh now.
    pub(crate) urgent: bool,
    pub(crate) closing: bool,
    /// The permanent failure that stopped the client's refreshes.
    pub(crate) stopped: Option<SessionError>,
}

/// A queued ReleaseCapacity.
#[derive(Debug)]
pub(crate) struct PendingRelease {
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
    Estimated(Arc<dyn WantsEstimate>),
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

impl Client {
    /// A builder with the defaults; add at least one server.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
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
    #[cfg_attr(not(feature = "server"), doc = "```ignore")]
    #[cfg_attr(feature = "server", doc = "```")]
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
            state.releases.push(PendingRelease {
                id: id.to_owned(),
                done,
            });
        }
        shared.wake.notify_one();
    }
}
