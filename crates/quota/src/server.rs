//! A whole quota server, assembled: the Allow edge on the service kit's
//! lean gRPC server and, as asked, the debug port (with the admin API),
//! idle reaping, configuration reload and the cluster mode, started
//! together and stopped together.
//!
//! # Implementation notes
//!
//! [`QuotaServer::serve`] spawns the side tasks, serves Allow until the
//! shutdown future completes and the connections have drained, then stops
//! the cluster mode (which gives its leases back, bounded by
//! [`RELEASE_BOUND`]) and aborts the other side tasks. The gRPC edge runs
//! under the same [`ServerLimits`] as Doorman's server: a cap on
//! connections, handshake and idle deadlines, a drain at shutdown.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate_doorman::Client;
use tollgate_service::{rustls, GrpcServer, ServerLimits, ServerTls, TlsError};
use tracing::{info, warn};

use super::admin::{router as admin_router, Admin};
use super::cluster::{run_until as run_cluster_until, ClusterOptions};
use super::grpc::{Allow, MAX_MESSAGE};
use super::http::router as http_router;
use super::reaper::spawn as spawn_reaper;
use super::reload::spawn as spawn_config_reload;
use super::service::Quota;

/// How long the cluster mode may take to give its leases back after the
/// drain: each release is bounded by the lease client's RPC deadline
/// (5 s), and a second more for good measure.
const RELEASE_BOUND: Duration = Duration::from_secs(6);

/// The shortest interval between two sweeps of idle buckets.
const MIN_REAP_INTERVAL: Duration = Duration::from_millis(10);

/// A quota server: `quotaservice.QuotaService/Allow` from a [`Quota`], and
/// what runs beside it. Start with [`QuotaServer::builder`], end with
/// [`QuotaServer::serve`].
///
/// Every option has a default: the default [`ServerLimits`], the
/// connections on the calling runtime, no TLS, and nothing beside Allow
/// (no debug port, no reaping, no reload, no cluster mode).
///
/// A [`Quota`] whose buckets are in Redis ([`Quota::with_store`]) is
/// served the same way, each connection's task polling the Allows that
/// await Redis beside its new calls, with its connections on the calling
/// runtime (beside the store's own tasks) rather than on
/// [`threads`](QuotaServer::threads); such a server refuses cluster mode.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_quota::QuotaConfig;
/// use tollgate_quota::QuotaServer;
/// use tollgate_quota::{QuotaLimits, Quota};
/// use tollgate_service::ServerLimits;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = QuotaConfig::from_yaml("namespaces:\n  ns:\n    buckets:\n      b: {size: 5, fill_rate: 1}\n")?;
/// let quota = Arc::new(Quota::new(config, QuotaLimits::default(), Arc::new(tollgate::SystemClock::new())));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:15100").await?;
/// let debug = tokio::net::TcpListener::bind("127.0.0.1:15150").await?;
/// let limits = ServerLimits {
///     max_connections: 10_000,
///     idle_timeout: Duration::from_secs(60),
///     ..ServerLimits::default()
/// };
/// QuotaServer::builder(quota)
///     .limits(limits)
///     .threads(4)
///     .debug_port(debug)
///     .reap_every(Duration::from_secs(1))
///     .reload("quota.yaml", Duration::from_secs(5))
///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a server does nothing until `serve` is called"]
pub struct QuotaServer {
    quota: Arc<Quota>,
    limits: ServerLimits,
    threads: Option<usize>,
    /// The rustls setup, and whether it asks clients for certificates.
    tls: Option<(Arc<rustls::ServerConfig>, bool)>,
    debug: Option<TcpListener>,
    admin: Option<Admin>,
    reap_every: Option<Duration>,
    reload: Option<(PathBuf, Duration)>,
    cluster: Option<(Client, ClusterOptions)>,
}

impl QuotaServer {
    /// A server answering from `quota`, with every default.
    pub fn builder(quota: Arc<Quota>) -> QuotaServer {
        QuotaServer {
            quota,
            limits: ServerLimits::default(),
            threads: None,
            tls: None,
            debug: None,
            admin: None,
            reap_every: None,
            reload: None,
            cluster: None,
        }
    }

    /// Serves under `limits` (default [`ServerLimits::default`]), with
    /// requests capped at 16 KiB whatever `max_message_bytes` says.
    pub fn limits(mut self, limits: ServerLimits) -> QuotaServer {
        self.limits = limits;
        self
    }

    /// Runs the connections on `threads` threads (at least one), each with
    /// a single-threaded runtime of its own, handed out round robin: a call
    /// is read, decided and answered on one thread, with no task or wake-up
    /// crossing to another. Without it (the default) the connections are
    /// tasks of the runtime that serves.
    pub fn threads(mut self, threads: usize) -> QuotaServer {
        self.threads = Some(threads);
        self
    }

    /// Serves over TLS as `tls` says (mutual TLS when it names a client
    /// CA); the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or used, or rustls
    /// refusing the setup.
    pub fn tls(mut self, tls: &ServerTls) -> Result<QuotaServer, TlsError> {
        self.tls = Some((tls.rustls_config()?, tls.is_mutual()));
        Ok(self)
    }

    /// Serves the HTTP debug port on `listener` while the server runs: a
    /// status page at `/`, `POST /api/allow`, `/api/buckets`, `/metrics`
    /// and `/healthz` ([`http_router`](crate::http_router)), with the
    /// admin API when [`QuotaServer::admin`] gives one.
    pub fn debug_port(mut self, listener: TcpListener) -> QuotaServer {
        self.debug = Some(listener);
        self
    }

    /// Serves `admin`'s API (`/api/admin/...`) on the debug port; nothing
    /// without [`QuotaServer::debug_port`].
    pub fn admin(mut self, admin: Admin) -> QuotaServer {
        self.admin = Some(admin);
        self
    }

    /// Removes idle buckets every `every` (at least every 10 ms) while the
    /// server runs ([`spawn_reaper`](crate::spawn_reaper)).
    pub fn reap_every(mut self, every: Duration) -> QuotaServer {
        self.reap_every = Some(every.max(MIN_REAP_INTERVAL));
        self
    }

    /// Reloads the configuration from `path` when it changes (checked
    /// every `every`) or on SIGHUP, while the server runs
    /// ([`spawn_config_reload`](crate::spawn_config_reload)).
    pub fn reload(mut self, path: impl Into<PathBuf>, every: Duration) -> QuotaServer {
        self.reload = Some((path.into(), every));
        self
    }

    /// Cluster mode: the buckets' rates are leased through `client` as
    /// `options` says ([`run_cluster`](crate::run_cluster));
    /// after the drain the leases are given back, waiting at most 6 s (the
    /// lease client's deadline, and a second more).
    pub fn cluster(mut self, client: Client, options: ClusterOptions) -> QuotaServer {
        self.cluster = Some((client, options));
        self
    }

    /// Serves Allow on `listener`, and what the options ask for beside it,
    /// until `shutdown` completes; then drains, gives the cluster mode's
    /// leases back, and stops the side tasks. See [`GrpcServer::serve`]
    /// for what is done with each connection. Logs the addresses it
    /// serves on (`quota gRPC listening`, `quota debug HTTP listening`).
    ///
    /// # Errors
    ///
    /// An error reading a listener's address or starting a thread's
    /// runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection;
    /// the side tasks run on until the runtime ends, and the cluster
    /// mode's leases are not given back.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let quota = self.quota;
        if quota.has_store() && self.cluster.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a quota server keeps its buckets in Redis or leases their rates \
                 (cluster mode), not both",
            ));
        }
        let mut side: Vec<JoinHandle<()>> = Vec::new();
        if let Some(every) = self.reap_every {
            side.push(spawn_reaper(Arc::clone(&quota), every));
        }
        if let Some((path, every)) = self.reload {
            side.push(spawn_config_reload(Arc::clone(&quota), path, every));
        }
        // Stopped after the drain, when it releases its leases.
        let (stop_cluster, stopped) = tokio::sync::oneshot::channel::<()>();
        let cluster = self.cluster.map(|(client, options)| {
            tokio::spawn(run_cluster_until(
                Arc::clone(&quota),
                client,
                options,
                async move {
                    let _ = stopped.await;
                },
            ))
        });
        if let Some(port) = self.debug {
            info!(addr = %port.local_addr()?, "quota debug HTTP listening");
            let mut router = http_router(Arc::clone(&quota));
            if let Some(admin) = self.admin {
                router = router.merge(admin_router(Arc::new(admin)));
                info!("admin API on the debug port");
            }
            side.push(tokio::spawn(async move {
                if let Err(e) = axum::serve(port, router).await {
                    tracing::error!(error = %e, "debug HTTP server failed");
                }
            }));
        }

        let limits = ServerLimits {
            max_message_bytes: self.limits.max_message_bytes.min(MAX_MESSAGE),
            ..self.limits
        };
        let local = listener.local_addr()?;
        let awaits = quota.has_store();
        let mut server = GrpcServer::new(Arc::new(Allow(quota))).limits(limits);
        match self.tls {
            None => info!(addr = %local, limits = ?self.limits, "quota gRPC listening"),
            Some((tls, mutual)) => {
                info!(addr = %local, limits = ?self.limits, mutual, "quota gRPC listening over TLS");
                server = server.tls_config(tls);
            }
        }
        // An Allow that awaits Redis is answered beside the store's own
        // tasks, on the calling runtime.
        match self.threads {
            Some(threads) if !awaits => server = server.threads(threads),
            _ => {}
        }
        let served = server.serve(listener, shutdown).await;
        if let Some(cluster) = cluster {
            let _ = stop_cluster.send(());
            release(cluster).await;
        }
        for task in side {
            task.abort();
        }
        served
    }
}

/// Waits, at most [`RELEASE_BOUND`], for the stopped cluster mode to give
/// its leases back, and logs how that went.
async fn release(mut cluster: JoinHandle<super::cluster::Released>) {
    match tokio::time::timeout(RELEASE_BOUND, &mut cluster).await {
        Ok(Ok(released)) => {
            for (id, e) in &released.failed {
                warn!(resource = id, error = %e, "lease not released: the lease server keeps it until it expires");
            }
            info!(released = released.released, "leases released");
        }
        Ok(Err(e)) => {
            warn!(error = %e, "the cluster task failed: the lease server keeps its leases until they expire")
        }
        Err(_) => {
            cluster.abort();
            warn!("leases not released within {RELEASE_BOUND:?}: the lease server keeps them until they expire");
        }
    }
}
