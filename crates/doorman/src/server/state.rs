//! The server's state: what a [`Server`] holds, defined once for the files
//! that give it behaviour (`mastership.rs`, `resources.rs`, `decisions.rs`,
//! `tree.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::watch;

use super::parent::Upstream;
use super::wire::RequestLimits;
use crate::clock::WallClock;
use crate::config::{ServerConfig, Template};
use crate::election::Mastership;
use crate::lease::Timestamp;
use crate::metrics::Metrics;
use crate::store::Resource;
use tollgate_service::{rustls, Readiness, ServerLimits};

/// The lease server. Cheap to clone: clones share state.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::{Server, ServerConfig, SingleElection};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let election = SingleElection::new(Some(listener.local_addr()?.to_string()));
/// let server = Server::builder(ServerConfig::builtin())
///     .election(&election)
///     .build();
/// server.spawn_background(Duration::from_secs(5));
///
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let serving = tokio::spawn(server.clone().serve(listener, async {
///     let _ = stopped.await;
/// }));
/// assert!(server.current_mastership().is_master);
/// stop.send(()).unwrap();
/// serving.await??;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) config: RwLock<Arc<Snapshot>>,
    /// Hashed with foldhash (seeded per map), as the store's client ids.
    pub(super) resources: RwLock<ResourceMap>,
    pub(super) view: RwLock<View>,
    pub(super) clock: Arc<dyn WallClock>,
    pub(super) limits: RequestLimits,
    pub(super) metrics: Metrics,
    /// Set on an intermediate server: its parent and what it granted.
    pub(super) upstream: Option<Upstream>,
    /// How [`Server::serve`] serves.
    pub(super) serving: Serving,
    /// Not ready while the election cannot reach its store.
    pub(super) readiness: Readiness,
}

/// What [`Server::serve`] serves under.
#[derive(Debug, Clone)]
pub(super) struct Serving {
    pub(super) limits: ServerLimits,
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    /// Threads of their own for the connections, if set.
    pub(super) threads: Option<usize>,
}

/// The server's view of the election.
#[derive(Debug)]
pub(super) struct View {
    pub(super) rx: watch::Receiver<Mastership>,
    /// The last mastership seen on `rx`.
    pub(super) current: Mastership,
    /// When this server last won mastership, and until when its learning
    /// mode lasts at most; `None` while not master.
    pub(super) since: Option<Began>,
    /// The resources of this server's last term, put aside when it lost
    /// mastership, with that term, for a re-election that keeps them
    /// ([`Mastership::keeps_leases`]).
    pub(super) kept: Option<(ResourceMap, Began)>,
}

/// The resources by id.
pub(super) type ResourceMap = HashMap<String, Arc<Entry>, foldhash::fast::RandomState>;

impl View {
    /// When the current term began, or, while not master, the mastership
    /// to answer with.
    pub(super) fn answer(&self) -> Result<Began, Mastership> {
        match self.since {
            Some(since) => Ok(Began {
                grant_until: self.current.promise.as_ref().map(|p| p.until()),
                ..since
            }),
            None => Err(self.current.clone()),
        }
    }
}

/// A term: when it began, until when its learning mode lasts at most, and
/// (per request) until when its leases may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Began {
    /// When mastership was won.
    pub(super) at: Timestamp,
    /// Learning mode ends by then whatever the template says: every lease
    /// of an earlier master has ended ([`Mastership::learning_until`]).
    pub(super) learning_until: Option<Timestamp>,
    /// No lease may end later ([`Mastership::promise`]), as read when a
    /// request came; `None` in the view itself.
    pub(super) grant_until: Option<Timestamp>,
}

impl Began {
    /// When learning mode of `length` ends in this term.
    pub(super) fn learning_ends(&self, length: std::time::Duration) -> Timestamp {
        let full = self.at + length;
        self.learning_until.map_or(full, |u| u.min(full))
    }
}

/// The configuration in force, and its generation (each reload bumps it).
#[derive(Debug)]
pub(super) struct Snapshot {
    pub(super) config: ServerConfig,
    pub(super) generation: u64,
}

/// One resource, behind its own lock.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) state: Mutex<EntryState>,
}

/// One resource's state.
#[derive(Debug)]
pub(super) struct EntryState {
    /// The template it matched.
    pub(super) template: Arc<Template>,
    /// The configuration generation `template` comes from.
    pub(super) generation: u64,
    /// Its leases.
    pub(super) store: Resource,
    /// Each client's priority, kept only on an intermediate server (which
    /// sends its parent one band per priority); may name expired clients.
    pub(super) priorities: HashMap<String, i64>,
    /// Intermediate servers that lost their state, and until when they are
    /// in learning mode here ([`EntryState::relearn`]).
    pub(super) relearning: HashMap<String, Timestamp>,
    /// Set when the sweeper removed this entry from the map.
    pub(super) removed: bool,
}

/// A server that its own background tasks hold without keeping it alive.
#[derive(Debug, Clone)]
pub(super) struct WeakServer(pub(super) Weak<Inner>);

impl WeakServer {
    /// The server, unless it is gone.
    pub(super) fn upgrade(&self) -> Option<Server> {
        self.0.upgrade().map(|inner| Server { inner })
    }
}
