//! [`ClientBuilder`]: the one way to make a [`Client`], and what can go
//! wrong making one.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::{
    metrics, task, Backoff, Client, ClientMetrics, Config, Handle, Shared, State, CLIENT_COUNTER,
};
use crate::clock::{SystemWallClock, WallClock};
use crate::transport::{self, Grpc, Transport};

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
    /// A builder with the defaults ([`Client::builder`]).
    pub(super) fn new() -> ClientBuilder {
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
    #[cfg(any(test, feature = "in-process"))]
    pub(crate) fn transport(mut self, transport: Arc<dyn Transport>) -> ClientBuilder {
        self.transport = Some(transport);
        self
    }

    /// Seeds the backoff's jitter (default: from the time, the process id
    /// and the client's number), so that a run can be repeated.
    #[cfg(any(test, feature = "in-process"))]
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
