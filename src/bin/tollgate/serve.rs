//! `tollgate serve`: the capacity server, its debug port and config reload.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tollgate::doorman::clock::SystemClock;
use tollgate::doorman::config::Config;
use tollgate::doorman::election::etcd::{Etcd, EtcdConfig};
use tollgate::doorman::election::single::Single;
use tollgate::doorman::election::Election;
use tollgate::doorman::server::{Parent, Server};
use tollgate::doorman::{debug, reload};
use tracing::info;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Resource configuration (Doorman's YAML format). Without it, every
    /// resource shares 1000 units by FAIR_SHARE.
    #[arg(long)]
    config: Option<PathBuf>,
    /// gRPC port.
    #[arg(long, default_value_t = 15000)]
    port: u16,
    /// HTTP debug port (/debug/status, /metrics, /healthz); 0 disables it.
    #[arg(long, default_value_t = 15050)]
    debug_port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    host: IpAddr,
    /// Address clients should use to reach this server, reported by
    /// Discovery (default: the listening address; set it when listening on
    /// 0.0.0.0, and with --etcd-endpoints, where followers redirect to it).
    #[arg(long)]
    advertise: Option<String>,
    /// How often expired leases and idle resources are swept, in seconds.
    #[arg(long, default_value_t = 5)]
    sweep_interval: u64,
    /// How often the configuration file is checked for changes, in seconds.
    #[arg(long, default_value_t = 5)]
    reload_interval: u64,
    /// etcd endpoints (comma-separated `host:port`): elect a master among
    /// the servers sharing `--election-key` instead of always being master.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// The etcd election key (with --etcd-endpoints).
    #[arg(long, default_value = "/tollgate/master")]
    election_key: String,
    /// The etcd lease TTL in seconds: how long a master that cannot reach
    /// etcd keeps mastership.
    #[arg(long, default_value_t = 10)]
    election_ttl: u64,
    /// Run as an intermediate server: ask the server at this `host:port` for
    /// capacity (GetServerCapacity) and share what it grants.
    #[arg(long)]
    parent: Option<String>,
    /// This server's id when asking --parent (default: the advertised
    /// address).
    #[arg(long)]
    server_id: Option<String>,
    /// With --parent: the parent's refresh interval is multiplied by this
    /// before it is handed on to this server's clients.
    #[arg(long, default_value_t = 0.5)]
    decay_factor: f64,
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
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n);
    }
    rt.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => {
            Config::from_file(path).with_context(|| format!("loading {}", path.display()))?
        }
        None => {
            info!("no --config: serving the built-in catch-all FAIR_SHARE template");
            Config::builtin()
        }
    };
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding gRPC port {addr}"))?;
    let local = listener.local_addr()?;
    let advertised = args.advertise.clone().unwrap_or_else(|| local.to_string());
    let etcd = if args.etcd_endpoints.is_empty() {
        None
    } else {
        info!(endpoints = ?args.etcd_endpoints, key = args.election_key, "etcd election");
        Some(Etcd::start(EtcdConfig {
            endpoints: args.etcd_endpoints.clone(),
            key: args.election_key.clone(),
            ttl: Duration::from_secs(args.election_ttl),
            advertise: advertised.clone(),
        })?)
    };
    let single = Single::new(Some(advertised.clone()));
    let election: &dyn Election = match &etcd {
        Some(e) => e,
        None => &single,
    };
    let server = match &args.parent {
        None => Server::new(config, election, Arc::new(SystemClock)),
        Some(parent) => {
            anyhow::ensure!(
                args.decay_factor > 0.0 && args.decay_factor <= 1.0,
                "--decay-factor must be in (0, 1]"
            );
            info!(parent, "intermediate server");
            Server::with_parent(
                config,
                election,
                Arc::new(SystemClock),
                Parent {
                    address: parent.clone(),
                    server_id: args.server_id.clone().unwrap_or_else(|| advertised.clone()),
                    decay_factor: args.decay_factor,
                },
            )
        }
    };
    server.spawn_background(Duration::from_secs(args.sweep_interval.max(1)));
    if let Some(path) = args.config.clone() {
        reload::spawn(
            server.clone(),
            path,
            Duration::from_secs(args.reload_interval.max(1)),
        );
    }
    let shutdown = async move {
        let _ = tokio::signal::ctrl_c().await;
        info!("shutting down");
        // Hand mastership over first: draining connections may take a while.
        if let Some(etcd) = etcd {
            etcd.resign().await;
        }
    };
    if args.debug_port != 0 {
        let daddr = SocketAddr::new(args.host, args.debug_port);
        let dl = tokio::net::TcpListener::bind(daddr)
            .await
            .with_context(|| format!("binding debug port {daddr}"))?;
        info!(addr = %dl.local_addr()?, "debug HTTP listening");
        let s = server.clone();
        tokio::spawn(async move {
            if let Err(e) = debug::serve(s, dl, std::future::pending()).await {
                tracing::error!(error = %e, "debug HTTP server failed");
            }
        });
    }
    info!(addr = %local, "gRPC listening");
    server.serve(listener, shutdown).await?;
    Ok(())
}
