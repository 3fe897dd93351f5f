//! `tollgate rls`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on
//! envoyproxy/ratelimit's YAML configuration, with `grpc.health.v1.Health`
//! on the same port, the service kit's debug port (`/`, `/metrics`,
//! `/healthz`, with `/rlconfig` and the reference's `/healthcheck` and
//! `/json`) and reload on SIGHUP.
//!
//! The reference's settings that change answers are flags, and its
//! environment variables are read when a flag is not given.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tollgate_rls::{
    http_router, spawn_config_reload, RateLimitService, RlsConfig, RlsServer, RlsSettings,
    UnixClock,
};
use tollgate_rls::{OnError, RedisStore};
use tollgate_service::{ServerLimits, ShutdownSignals};
use tracing::{info, warn};

use crate::cli;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Where a flag is not given, envoyproxy/ratelimit's environment variable \
    of the same meaning is read: GRPC_HOST, GRPC_PORT, DEBUG_HOST, DEBUG_PORT, \
    LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, \
    LIMIT_RESET_HEADER, SHADOW_MODE, QUOTA_MODE, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, \
    NEAR_LIMIT_RATIO, MERGE_DOMAIN_CONFIG.\n\n\
    Examples:\n  \
    tollgate rls --config crates/rls/examples/config\n  \
    tollgate rls --config /srv/runtime_data/current/config --response-headers --port 8081"
)]
pub(crate) struct Args {
    /// The configuration: a YAML file in envoyproxy/ratelimit's format, or
    /// a directory of them (every file under it, dot files aside). Reloaded
    /// on SIGHUP and when a file is added, edited or removed (checked every
    /// --reload-interval); a configuration that does not load is logged and
    /// the previous one keeps answering.
    #[arg(long)]
    config: PathBuf,
    /// Address (or host name) the gRPC port listens on [env: GRPC_HOST;
    /// default 0.0.0.0].
    #[arg(long, value_parser = cli::host)]
    host: Option<IpAddr>,
    /// gRPC port: ShouldRateLimit and grpc.health.v1.Health [env:
    /// GRPC_PORT; default 8081].
    #[arg(long)]
    port: Option<u16>,
    /// HTTP debug port (/, /metrics, /healthz, /rlconfig, POST /json); 0
    /// disables it [env: DEBUG_PORT; default 6070].
    #[arg(long)]
    debug_port: Option<u16>,
    /// Address the debug port listens on: loopback unless opened on
    /// purpose, since it has no authentication [env: DEBUG_HOST; default
    /// 127.0.0.1].
    #[arg(long, value_parser = cli::host)]
    debug_host: Option<IpAddr>,
    /// Send RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
    /// headers [env: LIMIT_RESPONSE_HEADERS_ENABLED].
    #[arg(long)]
    response_headers: bool,
    /// The limit header's name [env: LIMIT_LIMIT_HEADER].
    #[arg(long)]
    limit_header: Option<String>,
    /// The remaining header's name [env: LIMIT_REMAINING_HEADER].
    #[arg(long)]
    remaining_header: Option<String>,
    /// The reset header's name [env: LIMIT_RESET_HEADER].
    #[arg(long)]
    reset_header: Option<String>,
    /// Answer OK overall whatever the limits say, statuses unchanged [env:
    /// SHADOW_MODE].
    #[arg(long)]
    shadow_mode: bool,
    /// Treat every descriptor as a quota descriptor: a request fails only
    /// when all of them are over [env: QUOTA_MODE].
    #[arg(long)]
    quota_mode: bool,
    /// When a descriptor of a request would go over its limit, charge only
    /// the descriptors that go over [env:
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT].
    #[arg(long)]
    stop_increment_when_over_limit: bool,
    /// The share of a limit past which hits count as near it, for the
    /// near_limit metric [env: NEAR_LIMIT_RATIO; default 0.8].
    #[arg(long)]
    near_limit_ratio: Option<f64>,
    /// Let several files name one domain, their descriptors added together
    /// [env: MERGE_DOMAIN_CONFIG].
    #[arg(long)]
    merge_domain_config: bool,
    /// Most keys held per window unit (and per smooth rule); past it the
    /// least recently used are forgotten (they start afresh).
    #[arg(long, default_value_t = RlsSettings::DEFAULT_MAX_KEYS, value_parser = cli::positive::<usize>)]
    max_keys: usize,
    /// Keep the counters in Redis (`redis://HOST:PORT`, `rediss://` for
    /// TLS, `redis+sentinel://HOST:PORT/MASTER`, or a Redis Cluster's
    /// seed nodes: two or more URLs, comma-separated or each after its own
    /// --store), so that every `tollgate rls` on it answers as one, as
    /// envoyproxy/ratelimit's replicas on its Redis do. Without it, each
    /// process counts alone in memory.
    #[arg(long, value_name = "URL")]
    store: Vec<String>,
    /// With --store: trust this CA (PEM) for `rediss://` servers instead
    /// of the system's roots.
    #[arg(long, value_name = "FILE", requires = "store")]
    store_ca: Option<PathBuf>,
    /// The prefix of every Redis key: replicas share counters by sharing
    /// a store and a prefix.
    #[arg(long, default_value = "tollgate:rls:", requires = "store")]
    store_prefix: String,
    /// The longest a call waits for Redis; past it --on-error decides.
    #[arg(long, default_value = "10ms", value_parser = cli::positive_duration, requires = "store")]
    store_deadline: Duration,
    /// When Redis fails or is late: allow (answer OK), deny (answer
    /// OVER_LIMIT) or local (count alone at each limit divided by
    /// --replicas).
    #[arg(long, default_value = "local", value_parser = ["allow", "deny", "local"], requires = "store")]
    on_error: String,
    /// How many replicas share the store, for --on-error local.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<u32>, requires = "store")]
    replicas: u32,
    /// How often the configuration's files are checked for a change (a
    /// file added, edited or removed under a directory).
    #[arg(long, default_value = "1s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    reload_interval: Duration,
    /// Threads (default: one per core): the gRPC connections run on this
    /// many single-threaded runtimes (with --store, on one runtime of this
    /// many workers).
    #[arg(long, value_parser = cli::positive::<usize>)]
    threads: Option<usize>,
    #[command(flatten)]
    tls: cli::ServerTlsArgs,
    /// Most gRPC connections open at once; more are accepted and closed at
    /// once.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    max_connections: usize,
    /// How long a gRPC connection may stay open with no call in flight.
    #[arg(long, default_value = "5m", value_parser = cli::duration, allow_hyphen_values = true)]
    idle_timeout: Duration,
    /// On SIGTERM or SIGINT: how long calls in flight may take to finish
    /// before every connection is closed and the server exits.
    #[arg(long, default_value = "5s", value_parser = cli::duration, allow_hyphen_values = true)]
    drain_timeout: Duration,
}

/// A boolean as Go's `strconv.ParseBool` reads it, which the reference
/// uses for its environment.
fn go_bool(name: &str, text: &str) -> anyhow::Result<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => anyhow::bail!("{name}={text:?} is not a boolean (true or false)"),
    }
}

/// The environment variable `name`, if set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_bool(flag: bool, name: &str) -> anyhow::Result<bool> {
    match env(name) {
        Some(v) if !flag => go_bool(name, &v),
        _ => Ok(flag),
    }
}

fn env_parse<T: std::str::FromStr>(flag: Option<T>, name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    if let Some(v) = flag {
        return Ok(v);
    }
    match env(name) {
        Some(v) => v.parse().map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}")),
        None => Ok(default),
    }
}

impl Args {
    fn settings(&self) -> anyhow::Result<RlsSettings> {
        let d = RlsSettings::default();
        let near_limit_ratio = env_parse(
            self.near_limit_ratio,
            "NEAR_LIMIT_RATIO",
            d.near_limit_ratio,
        )?;
        if !(0.0..=1.0).contains(&near_limit_ratio) {
            anyhow::bail!("the near-limit ratio must be from 0 to 1, not {near_limit_ratio}");
        }
        Ok(RlsSettings {
            response_headers: env_bool(self.response_headers, "LIMIT_RESPONSE_HEADERS_ENABLED")?,
            limit_header: env_parse(
                self.limit_header.clone(),
                "LIMIT_LIMIT_HEADER",
                d.limit_header,
            )?,
            remaining_header: env_parse(
                self.remaining_header.clone(),
                "LIMIT_REMAINING_HEADER",
                d.remaining_header,
            )?,
            reset_header: env_parse(
                self.reset_header.clone(),
                "LIMIT_RESET_HEADER",
                d.reset_header,
            )?,
            shadow_mode: env_bool(self.shadow_mode, "SHADOW_MODE")?,
            quota_mode: env_bool(self.quota_mode, "QUOTA_MODE")?,
            stop_increment_when_over_limit: env_bool(
                self.stop_increment_when_over_limit,
                "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            )?,
            near_limit_ratio,
            max_keys: self.max_keys,
        })
    }

    fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout,
            drain_timeout: self.drain_timeout,
            ..ServerLimits::default()
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    cli::block_on(args.threads, serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Before anything else, so that no signal can kill the process with its
    // default action once it runs.
    let signals =
        ShutdownSignals::install().context("installing the SIGTERM and SIGINT handlers")?;
    let tls = args.tls.tls();
    if let Some(tls) = &tls {
        tls.rustls_config()?;
        if let Some(problem) = tls.date_problem(std::time::SystemTime::now()) {
            warn!("{problem}");
        }
    }
    let settings = args.settings()?;
    let merge = env_bool(args.merge_domain_config, "MERGE_DOMAIN_CONFIG")?;
    let host = env_parse(args.host, "GRPC_HOST", IpAddr::from([0, 0, 0, 0]))?;
    let port = env_parse(args.port, "GRPC_PORT", 8081)?;
    let debug_host = env_parse(args.debug_host, "DEBUG_HOST", IpAddr::from([127, 0, 0, 1]))?;
    let debug_port = env_parse(args.debug_port, "DEBUG_PORT", 6070)?;
    let config = RlsConfig::load(&args.config, merge)
        .with_context(|| format!("loading {}", args.config.display()))?;
    if config.domains().is_empty() {
        warn!(config = %args.config.display(), "the configuration has no domains: every descriptor will be answered OK with no limit");
    }
    let server_limits = args.limits();
    crate::serve::raise_fd_limit(server_limits.max_connections);
    let mut service = RateLimitService::new(Some(config), settings, Arc::new(UnixClock));
    if !args.store.is_empty() {
        let url = args.store.join(",");
        let on_error: OnError = args.on_error.parse()?;
        let mut store = RedisStore::builder(url.as_str())
            .prefix(args.store_prefix.as_str())
            .deadline(args.store_deadline)
            .on_error(on_error)
            .replicas(args.replicas);
        if let Some(ca) = &args.store_ca {
            store = store.ca(ca);
        }
        let store = store.connect().await?;
        service = service.with_store(store)?;
        info!(store = %url, prefix = %args.store_prefix, "rls counters in Redis");
    }
    let service = Arc::new(service);
    service.metrics().config_load_success_inc();
    spawn_config_reload(
        Arc::clone(&service),
        args.config.clone(),
        merge,
        args.reload_interval,
    );
    let addr = SocketAddr::new(host, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding gRPC port {addr}"))?;
    let local = listener.local_addr()?;
    if debug_port != 0 {
        let daddr = SocketAddr::new(debug_host, debug_port);
        let dl = tokio::net::TcpListener::bind(daddr)
            .await
            .with_context(|| format!("binding debug port {daddr}"))?;
        info!(addr = %dl.local_addr()?, "rls debug HTTP listening");
        let router = http_router(Arc::clone(&service));
        tokio::spawn(async move {
            if let Err(e) = axum::serve(dl, router).await {
                tracing::error!(error = %e, "debug HTTP server failed");
            }
        });
    }
    let shutdown = async move {
        signals.recv().await;
    };
    let threads = args.threads.unwrap_or_else(cli::cores);
    let mut server = RlsServer::builder(service)
        .limits(server_limits)
        .threads(threads);
    match &tls {
        None => info!(addr = %local, "rls gRPC listening"),
        Some(tls) => {
            info!(addr = %local, mutual = args.tls.mutual(), "rls gRPC listening over TLS");
            server = server.tls(tls)?;
        }
    }
    server.serve(listener, shutdown).await?;
    info!("drained: exiting");
    Ok(())
}
