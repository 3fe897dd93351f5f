//! `tollgate quota`: the quotaservice-compatible Allow server, its debug
//! port (JSON Allow, bucket list, metrics), idle reaping and config reload.
//!
//! With `--store redis://HOST:PORT`, the buckets are kept in Redis and
//! shared by every server on it (see `tollgate_quota::QuotaStore`).
//!
//! With `--lease-servers`, buckets take their rates as Doorman leases
//! (cluster mode, see `tollgate_quota::run_cluster`), and give them
//! back after draining on SIGTERM or SIGINT. The server is assembled by
//! `tollgate_quota::QuotaServer`; this module reads the flags.
//!
//! A subcommand of its own rather than a second service inside `tollgate
//! serve`: the two servers have unrelated configurations, reload and
//! scaling (a quota server is stateless across restarts and scaled out; a
//! lease server is elected), so each gets its own process, ports and file.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tollgate_quota::{
    load_config, Admin, ClusterOptions, OnError, Quota, QuotaLimits, QuotaServer, QuotaStore,
};
use tollgate_service::{ClientTls, ServerLimits, ShutdownSignals};
use tracing::{info, warn};

use crate::cli;

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Examples:\n  \
    tollgate quota --config crates/quota/examples/quota-test-namespace.yaml\n  \
    tollgate quota --config /etc/tollgate/quota.yaml --admin --lease-servers 10.0.0.1:15000\n  \
    tollgate quota --config crates/quota/examples/quota-load.yaml --lease-servers doorman.example:15000 --lease-tls-ca ca.pem\n  \
    tollgate quota --config quota.yaml --store redis://10.0.0.5:6379 --store-replicas 3 --store-on-error local\n  \
    tollgate quota --config crates/quota/examples/quota-load.yaml --tls-cert server.pem --tls-key server.key --tls-client-ca clients-ca.pem")]
pub(crate) struct Args {
    /// Bucket configuration in the reference quotaservice's YAML format.
    #[arg(long)]
    config: PathBuf,
    /// gRPC port (`quotaservice.QuotaService/Allow`).
    #[arg(long, default_value_t = 15100)]
    port: u16,
    /// HTTP debug port (a status page at /, POST /api/allow,
    /// /api/buckets, /metrics, /healthz); 0 disables it.
    #[arg(long, default_value_t = 15150)]
    debug_port: u16,
    /// Address (or host name) the gRPC port listens on.
    #[arg(long, default_value = "0.0.0.0", value_parser = cli::host)]
    host: IpAddr,
    /// Address the debug HTTP port listens on: loopback unless opened on
    /// purpose (e.g. `--debug-host 0.0.0.0`), since it has no
    /// authentication.
    #[arg(long, default_value = "127.0.0.1", value_parser = cli::host)]
    debug_host: IpAddr,
    /// Most dynamic buckets alive at once, all namespaces together: bounds
    /// memory where a namespace's `max_dynamic_buckets` is 0 (no cap of its
    /// own, as in the reference). Past it, REJECTED_TOO_MANY_BUCKETS. With
    /// --store, it holds per server, on the dynamic buckets each answers.
    #[arg(long, default_value_t = QuotaLimits::DEFAULT_MAX_DYNAMIC_BUCKETS, value_parser = cli::positive::<u64>)]
    max_dynamic_buckets: u64,
    /// How often idle buckets are removed.
    #[arg(long, default_value = "1s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    reap_interval: Duration,
    /// How often the configuration file is checked for changes.
    #[arg(long, default_value = "5s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    reload_interval: Duration,
    /// Keep the buckets in Redis at this URL (`redis://[user:pass@]HOST:PORT[/DB]`,
    /// `rediss://` for TLS, `redis+sentinel://HOST:PORT[,HOST:PORT]/MASTER`),
    /// or in a Redis Cluster through its seed nodes (two or more URLs,
    /// comma-separated or each after its own --store), shared by every
    /// quota server on it with the same --store-prefix, so that several
    /// servers behind one address answer as one. Redis must be reachable at
    /// start (within --store-connect-timeout). Replaces the configuration
    /// file's `store:` section, if any.
    #[arg(long, value_name = "URL", conflicts_with = "lease_servers")]
    store: Vec<String>,
    /// With --store: trust this CA (PEM) for `rediss://` servers instead of
    /// the system's roots.
    #[arg(long, value_name = "FILE", requires = "store")]
    store_ca: Option<PathBuf>,
    /// With --store: the prefix of every Redis key.
    #[arg(long, default_value = "tollgate:quota:", requires = "store")]
    store_prefix: String,
    /// With --store: what an Allow is answered when Redis fails or is
    /// later than --store-deadline: `allow` (OK, no wait), `deny`
    /// (REJECTED_SERVER_ERROR) or `local` (this server's own bucket at the
    /// fill rate divided by --store-replicas).
    #[arg(long, default_value = "local", requires = "store", value_parser = on_error)]
    store_on_error: OnError,
    /// With --store: the longest an Allow waits for Redis.
    #[arg(long, default_value = "10ms", requires = "store", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    store_deadline: Duration,
    /// With --store: how many quota servers share the buckets (for
    /// `--store-on-error local`).
    #[arg(long, default_value_t = 1, requires = "store", value_parser = cli::positive::<u32>)]
    store_replicas: u32,
    /// With --store: the longest connecting to Redis may take, at start
    /// and at each reconnection try.
    #[arg(long, default_value = "2s", requires = "store", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    store_connect_timeout: Duration,
    /// Cluster mode: lease each named and default bucket's rate from the
    /// Doorman lease server(s) at these `host:port` addresses
    /// (comma-separated), whose resources `namespace:bucket` have the
    /// buckets' fill rates as capacity; dynamic buckets are leased one
    /// resource per name, so give each namespace with a template an
    /// `identifier_glob: "namespace:*"` at the template's fill rate. On
    /// SIGTERM or SIGINT the leases are released after the drain.
    #[arg(long, value_delimiter = ',')]
    lease_servers: Vec<String>,
    /// Cluster mode: dial the lease servers over TLS, trusting this CA
    /// (PEM). Apart from the `--tls-*` flags, which are this server's own.
    #[arg(long, requires = "lease_servers")]
    lease_tls_ca: Option<PathBuf>,
    /// With --lease-tls-ca: the client certificate the lease servers
    /// require (PEM).
    #[arg(long, requires_all = ["lease_tls_ca", "lease_tls_key"])]
    lease_tls_cert: Option<PathBuf>,
    /// With --lease-tls-cert: its private key (PEM).
    #[arg(long, requires = "lease_tls_cert")]
    lease_tls_key: Option<PathBuf>,
    /// With --lease-tls-ca: the name the lease servers' certificates must
    /// carry (default: the host dialled).
    #[arg(long, requires = "lease_tls_ca")]
    lease_tls_server_name: Option<String>,
    /// Cluster mode: how often demand is sent and leases applied.
    #[arg(long, default_value = "1s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    cluster_interval: Duration,
    /// Serve the admin API (/api/admin/...: list, add, update, delete
    /// namespaces and buckets) on the debug port. Changes are logged and
    /// written beside --config, to NAME.admin.yaml (read on top of it at
    /// every start and reload); --config itself is never written.
    #[arg(long)]
    admin: bool,
    /// Keep the admin API's changes in etcd too, at these `host:port`
    /// endpoints (comma-separated): at start the changes stored there, if
    /// any, replace those beside --config.
    #[arg(long, value_delimiter = ',', requires = "admin")]
    admin_etcd: Vec<String>,
    /// The etcd key holding the configuration document.
    #[arg(long, default_value = "/tollgate/quota")]
    admin_etcd_key: String,
    /// Threads (default: one per core): the gRPC connections run on this
    /// many single-threaded runtimes, everything else on a runtime of this
    /// many workers.
    #[arg(long, value_parser = cli::positive::<usize>)]
    threads: Option<usize>,
    #[command(flatten)]
    tls: cli::ServerTlsArgs,
    /// Most gRPC connections open at once; more are accepted and closed at
    /// once.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    max_connections: usize,
    /// How long a new gRPC connection may take to send the HTTP/2 preface.
    #[arg(long, default_value = "10s", value_parser = cli::duration, allow_hyphen_values = true)]
    handshake_timeout: Duration,
    /// How long a gRPC connection may stay open with no call in flight.
    #[arg(long, default_value = "5m", value_parser = cli::duration, allow_hyphen_values = true)]
    idle_timeout: Duration,
    /// On SIGTERM or SIGINT (Ctrl-C): how long calls in flight may take to
    /// finish before every gRPC connection is closed and the server exits.
    #[arg(long, default_value = "5s", value_parser = cli::duration, allow_hyphen_values = true)]
    drain_timeout: Duration,
}

impl Args {
    /// The gRPC port's limits.
    fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: self.max_connections,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            drain_timeout: self.drain_timeout,
            ..ServerLimits::default()
        }
    }

    /// The lease client's TLS setup, when --lease-tls-ca is given.
    fn lease_tls(&self) -> Option<ClientTls> {
        let mut tls = ClientTls::new(self.lease_tls_ca.clone()?);
        if let (Some(cert), Some(key)) = (&self.lease_tls_cert, &self.lease_tls_key) {
            tls = tls.identity(cert, key);
        }
        if let Some(name) = &self.lease_tls_server_name {
            tls = tls.domain(name.clone());
        }
        Some(tls)
    }
}

impl Args {
    /// The store `--store` and its flags name, if any: one URL, or a
    /// Cluster's seeds.
    fn store(&self) -> anyhow::Result<Option<QuotaStore>> {
        if self.store.is_empty() {
            return Ok(None);
        }
        let mut store = QuotaStore::new(self.store.join(","))?
            .prefix(self.store_prefix.clone())
            .deadline(self.store_deadline)
            .on_error(self.store_on_error)
            .replicas(self.store_replicas)
            .connect_timeout(self.store_connect_timeout);
        if let Some(ca) = &self.store_ca {
            store = store.ca(ca.clone());
        }
        Ok(Some(store))
    }
}

/// An `--store-on-error` mode.
fn on_error(text: &str) -> Result<OnError, String> {
    text.parse::<OnError>().map_err(|e| e.to_string())
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    cli::block_on(args.threads, serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Before anything else, so that no signal can kill the process with its
    // default action once it runs.
    let signals =
        ShutdownSignals::install().context("installing the SIGTERM and SIGINT handlers")?;
    // A store URL that cannot be parsed fails before anything starts.
    let store = args.store()?;
    // TLS files first: a wrong path fails before anything starts.
    let tls = args.tls.tls();
    if let Some(tls) = &tls {
        tls.rustls_config()?;
        if let Some(problem) = tls.date_problem(std::time::SystemTime::now()) {
            warn!("{problem}");
        }
    }
    let server_limits = args.limits();
    crate::serve::raise_fd_limit(server_limits.max_connections);
    let config =
        load_config(&args.config).with_context(|| format!("loading {}", args.config.display()))?;
    let limits = QuotaLimits {
        max_dynamic_buckets: args.max_dynamic_buckets,
    };
    if config.has_no_buckets() {
        warn!(config = %args.config.display(), "the configuration has no buckets: every request will be answered REJECTED_NO_BUCKET");
    }
    if let Some(why) = limits.binds(&config) {
        info!(
            max_dynamic_buckets = limits.max_dynamic_buckets,
            "dynamic buckets capped server-wide ({why}); past the cap, REJECTED_TOO_MANY_BUCKETS"
        );
    }
    let clock = Arc::new(tollgate::SystemClock::new());
    // --store, else the file's `store:` section.
    let store = store.or_else(|| config.store().cloned());
    let quota = match store {
        Some(store) => {
            let shown = format!("{store:?}");
            let quota = Quota::with_store(config, limits, clock, store).await?;
            info!(store = %shown, "buckets kept in redis");
            quota
        }
        None => Quota::new(config, limits, clock),
    };
    let quota = Arc::new(quota);
    let mut server = QuotaServer::builder(Arc::clone(&quota))
        .limits(server_limits)
        .threads(args.threads.unwrap_or_else(cli::cores))
        .reap_every(args.reap_interval)
        .reload(args.config.clone(), args.reload_interval);
    if let Some(tls) = &tls {
        server = server.tls(tls)?;
    }
    if !args.lease_servers.is_empty() {
        let mut builder = tollgate_doorman::Client::builder().servers(args.lease_servers.clone());
        if let Some(tls) = args.lease_tls() {
            builder = builder.tls(&tls)?;
        }
        let client = builder.build().context("building the lease client")?;
        info!(servers = ?args.lease_servers, tls = args.lease_tls_ca.is_some(), "cluster mode: bucket rates leased");
        server = server.cluster(
            client,
            ClusterOptions::default().interval(args.cluster_interval),
        );
    }
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding gRPC port {addr}"))?;
    if args.debug_port != 0 {
        let daddr = SocketAddr::new(args.debug_host, args.debug_port);
        let debug = tokio::net::TcpListener::bind(daddr)
            .await
            .with_context(|| format!("binding debug port {daddr}"))?;
        server = server.debug_port(debug);
        if args.admin {
            server = server.admin(admin(&args, quota).await?);
        }
    }
    let shutdown = async move {
        signals.recv().await;
    };
    server.serve(listener, shutdown).await?;
    info!("drained: exiting");
    Ok(())
}

/// The admin API `args` ask for: its changes kept beside --config, or in
/// etcd with --admin-etcd.
async fn admin(args: &Args, quota: Arc<Quota>) -> anyhow::Result<Admin> {
    if args.admin_etcd.is_empty() {
        return Admin::new(quota, args.config.clone())
            .with_context(|| format!("loading {}", args.config.display()));
    }
    let etcd =
        tollgate_service::EtcdKey::new(&args.admin_etcd, args.admin_etcd_key.as_str(), None)?;
    Admin::with_etcd(quota, args.config.clone(), etcd)
        .await
        .with_context(|| {
            format!(
                "loading the configuration from etcd key {:?}",
                args.admin_etcd_key
            )
        })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::{Cli, Command};
    use tollgate_quota::QuotaStore;

    fn store(argv: &[&str]) -> Option<QuotaStore> {
        let cli =
            Cli::try_parse_from([&["tollgate", "quota", "--config", "q.yaml"], argv].concat())
                .expect("valid arguments");
        let Command::Quota(args) = cli.command else {
            panic!("not quota");
        };
        args.store().expect("a store")
    }

    #[test]
    fn store_takes_a_url_or_a_clusters_seeds_listed_or_repeated() {
        assert_eq!(store(&[]), None);
        assert_eq!(
            store(&["--store", "redis://10.0.0.1:6379"]),
            Some(QuotaStore::new("redis://10.0.0.1:6379").unwrap())
        );
        let seeds = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
        let cluster = Some(QuotaStore::cluster(seeds).unwrap());
        assert_eq!(store(&["--store", &seeds.join(",")]), cluster);
        assert_eq!(store(&["--store", seeds[0], "--store", seeds[1]]), cluster);
        assert_eq!(
            store(&["--store", "rediss://h:1", "--store-ca", "ca.pem"]),
            Some(QuotaStore::new("rediss://h:1").unwrap().ca("ca.pem"))
        );
    }
}
