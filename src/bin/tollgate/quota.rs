//! `tollgate quota`: the quotaservice-compatible Allow server, its debug
//! port (JSON Allow, bucket list, metrics), idle reaping and config reload.
//!
//! With `--lease-servers`, buckets take their rates as Doorman leases
//! (cluster mode, see `tollgate::quota::cluster`).
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
use tollgate::quota::admin::{self, Admin};
use tollgate::quota::cluster::{self, ClusterOptions};
use tollgate::quota::config::Config;
use tollgate::quota::{grpc, http, reaper, reload, Limits, Quota};
use tracing::info;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Bucket configuration in the reference quotaservice's YAML format.
    #[arg(long)]
    config: PathBuf,
    /// gRPC port (`quotaservice.QuotaService/Allow`).
    #[arg(long, default_value_t = 15100)]
    port: u16,
    /// HTTP debug port (POST /api/allow, /api/buckets, /metrics,
    /// /healthz); 0 disables it.
    #[arg(long, default_value_t = 15150)]
    debug_port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    host: IpAddr,
    /// Cap on the dynamic buckets of a namespace whose
    /// `max_dynamic_buckets` is 0.
    #[arg(long, default_value_t = 100_000)]
    max_dynamic_buckets: u64,
    /// How often idle buckets are removed, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    reap_interval_ms: u64,
    /// How often the configuration file is checked for changes, in seconds.
    #[arg(long, default_value_t = 5)]
    reload_interval: u64,
    /// Cluster mode: lease each named and default bucket's rate from the
    /// Doorman lease server(s) at these `host:port` addresses
    /// (comma-separated), whose resources `namespace:bucket` have the
    /// buckets' fill rates as capacity.
    #[arg(long, value_delimiter = ',')]
    lease_servers: Vec<String>,
    /// Cluster mode: how often demand is sent and leases applied, in ms.
    #[arg(long, default_value_t = 1000)]
    cluster_interval_ms: u64,
    /// Serve the admin API (/api/admin/...: list, add, update, delete
    /// namespaces and buckets, written to --config) on the debug port.
    #[arg(long)]
    admin: bool,
    /// Tokio worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    anyhow::ensure!(
        args.max_dynamic_buckets >= 1,
        "--max-dynamic-buckets must be at least 1"
    );
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n);
    }
    rt.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let config = Config::from_file(&args.config)
        .with_context(|| format!("loading {}", args.config.display()))?;
    let limits = Limits {
        default_max_dynamic_buckets: args.max_dynamic_buckets,
    };
    let quota = Arc::new(Quota::new(
        config,
        limits,
        Arc::new(tollgate::SystemClock::new()),
    ));
    reaper::spawn(
        Arc::clone(&quota),
        Duration::from_millis(args.reap_interval_ms.max(10)),
    );
    reload::spawn(
        Arc::clone(&quota),
        args.config.clone(),
        Duration::from_secs(args.reload_interval.max(1)),
    );
    if !args.lease_servers.is_empty() {
        let client = tollgate::doorman::client::Client::builder()
            .servers(args.lease_servers.clone())
            .build()
            .context("building the lease client")?;
        info!(servers = ?args.lease_servers, "cluster mode: bucket rates leased");
        tokio::spawn(cluster::run(
            Arc::clone(&quota),
            client,
            ClusterOptions::default().interval(Duration::from_millis(args.cluster_interval_ms)),
        ));
    }
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding gRPC port {addr}"))?;
    let local = listener.local_addr()?;
    if args.debug_port != 0 {
        let daddr = SocketAddr::new(args.host, args.debug_port);
        let dl = tokio::net::TcpListener::bind(daddr)
            .await
            .with_context(|| format!("binding debug port {daddr}"))?;
        info!(addr = %dl.local_addr()?, "quota debug HTTP listening");
        let mut router = http::router(Arc::clone(&quota));
        if args.admin {
            let admin = Admin::new(Arc::clone(&quota), args.config.clone())
                .with_context(|| format!("loading {}", args.config.display()))?;
            router = router.merge(admin::router(Arc::new(admin)));
            info!("admin API on the debug port");
        }
        tokio::spawn(async move {
            if let Err(e) = axum::serve(dl, router).await {
                tracing::error!(error = %e, "debug HTTP server failed");
            }
        });
    }
    info!(addr = %local, "quota gRPC listening");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        info!("shutting down");
    };
    grpc::serve(quota, listener, shutdown).await?;
    Ok(())
}
