//! `tollgate serve`: the capacity server, its debug port and config reload.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tollgate_doorman::{Parent, Standalone};
use tollgate_service::{ClientTls, ServerLimits, ShutdownSignals};
use tracing::warn;

use crate::cli;

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Go Doorman's flags are read too, with one dash or two: -port, -debug_port, -config, \
    -parent, -hostname, -etcd_endpoints, -master_election_lock (--election-key), \
    -master_delay (--election-ttl), -tls, -cert_file, -key_file, -logtostderr; the others \
    are refused with what to use instead.\n\n\
    Without --advertise, a server listening on 0.0.0.0 advertises 0.0.0.0:PORT, which \
    followers cannot redirect clients to: give --advertise (or --hostname) with \
    --etcd-endpoints.\n\n\
    Examples:\n  \
    tollgate serve --config crates/doorman/examples/doorman-fair.yaml\n  \
    tollgate serve --port 15001 --parent 10.0.0.1:15000 --advertise 10.0.0.2:15001\n  \
    tollgate serve --etcd-endpoints 10.0.0.9:2379 --advertise 10.0.0.2:15000\n  \
    tollgate serve --config etcd:/tollgate/config --etcd-endpoints 10.0.0.9:2379 --advertise 10.0.0.2:15000\n  \
    tollgate serve --tls-cert server.pem --tls-key server.key\n  \
    tollgate serve --tls-cert server.pem --tls-key server.key --tls-client-ca clients-ca.pem\n  \
    tollgate serve --parent doorman.example:15000 --parent-tls-ca ca.pem")]
pub(crate) struct Args {
    /// Resource configuration (Doorman's YAML format): a file, or
    /// `etcd:KEY` to read it from etcd key KEY at --etcd-endpoints and
    /// apply every change put there. Without it, every resource shares 1000
    /// units by FAIR_SHARE.
    #[arg(long)]
    config: Option<PathBuf>,
    /// gRPC port.
    #[arg(long, default_value_t = 15000)]
    port: u16,
    /// HTTP debug port (/debug/status, /metrics, /healthz); 0 disables it.
    #[arg(long, default_value_t = 15050)]
    debug_port: u16,
    /// Address (or host name) the gRPC port listens on.
    #[arg(long, default_value = "0.0.0.0", value_parser = cli::host)]
    host: IpAddr,
    /// Address the debug HTTP port listens on: loopback unless opened on
    /// purpose (e.g. `--debug-host 0.0.0.0`), since it has no
    /// authentication.
    #[arg(long, default_value = "127.0.0.1", value_parser = cli::host)]
    debug_host: IpAddr,
    /// Address clients should use to reach this server, reported by
    /// Discovery (default: the listening address; set it when listening on
    /// 0.0.0.0, and with --etcd-endpoints, where followers redirect to it).
    #[arg(long)]
    advertise: Option<String>,
    /// Advertise this host with the gRPC port (`HOST:PORT`), as Go
    /// Doorman's `-hostname` does; --advertise gives the whole address.
    #[arg(long, value_name = "HOST", conflicts_with = "advertise")]
    hostname: Option<String>,
    /// How often expired leases and idle resources are swept.
    #[arg(long, default_value = "5s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    sweep_interval: Duration,
    /// How often the configuration file is checked for changes (an etcd
    /// key is watched instead).
    #[arg(long, default_value = "5s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    reload_interval: Duration,
    /// etcd endpoints (comma-separated `host:port`): elect a master among
    /// the servers sharing `--election-key` instead of always being master.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// The etcd election key (with --etcd-endpoints).
    #[arg(long, default_value = "/tollgate/master")]
    election_key: String,
    /// The etcd lease TTL (whole seconds): how long a master that cannot
    /// reach etcd keeps mastership.
    #[arg(long, default_value = "10s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    election_ttl: Duration,
    /// With --etcd-endpoints: reach etcd over TLS, trusting this CA (PEM).
    #[arg(long, requires = "etcd_endpoints")]
    etcd_tls_ca: Option<PathBuf>,
    /// With --etcd-tls-ca: the client certificate etcd requires (PEM).
    #[arg(long, requires_all = ["etcd_tls_ca", "etcd_tls_key"])]
    etcd_tls_cert: Option<PathBuf>,
    /// With --etcd-tls-cert: its private key (PEM).
    #[arg(long, requires = "etcd_tls_cert")]
    etcd_tls_key: Option<PathBuf>,
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
    /// With --parent: dial it over TLS, trusting this CA (PEM).
    #[arg(long, requires = "parent")]
    parent_tls_ca: Option<PathBuf>,
    /// With --parent-tls-ca: this server's certificate (PEM), for a parent
    /// that requires client certificates.
    #[arg(long, requires_all = ["parent_tls_ca", "parent_tls_key"])]
    parent_tls_cert: Option<PathBuf>,
    /// With --parent-tls-cert: its private key (PEM).
    #[arg(long, requires = "parent_tls_cert")]
    parent_tls_key: Option<PathBuf>,
    #[command(flatten)]
    tls: cli::ServerTlsArgs,
    /// Threads (default: one per core): the gRPC connections run on this
    /// many single-threaded runtimes, everything else on a runtime of this
    /// many workers.
    #[arg(long, value_parser = cli::positive::<usize>)]
    threads: Option<usize>,
    /// Largest gRPC request message, in bytes (at least 4096: one request
    /// with the longest ids a server accepts, 1 KiB each, takes about
    /// 2.1 KB). Lease clients split their requests at 64 KiB: below that,
    /// a client with many resources must be told the smaller size.
    #[arg(long, default_value_t = ServerLimits::default().max_message_bytes, value_parser = message_bytes)]
    max_message_bytes: usize,
    /// Most concurrent HTTP/2 streams (RPCs) per connection.
    #[arg(long, default_value_t = ServerLimits::default().max_concurrent_streams)]
    max_concurrent_streams: u32,
    /// Most connections open at once; more are accepted and closed at once.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    max_connections: usize,
    /// How long one RPC may take, reading its request included (e.g. `10s`).
    #[arg(long, default_value = "10s", value_parser = cli::duration, allow_hyphen_values = true)]
    request_timeout: Duration,
    /// How long a new connection may take to send the HTTP/2 preface.
    #[arg(long, default_value = "10s", value_parser = cli::duration, allow_hyphen_values = true)]
    handshake_timeout: Duration,
    /// How long a connection may stay open with no RPC in flight.
    #[arg(long, default_value = "5m", value_parser = cli::duration, allow_hyphen_values = true)]
    idle_timeout: Duration,
    /// HTTP/2 PING interval.
    #[arg(long, default_value = "30s", value_parser = cli::duration, allow_hyphen_values = true)]
    keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed.
    #[arg(long, default_value = "10s", value_parser = cli::duration, allow_hyphen_values = true)]
    keepalive_timeout: Duration,
    /// On SIGTERM or SIGINT: how long in-flight RPCs may take to finish
    /// before every connection is closed and the server exits.
    #[arg(long, default_value = "5s", value_parser = cli::duration, allow_hyphen_values = true)]
    drain_timeout: Duration,
}

impl Args {
    fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_message_bytes: self.max_message_bytes,
            max_concurrent_streams: self.max_concurrent_streams,
            max_connections: self.max_connections,
            request_timeout: self.request_timeout,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            keepalive_interval: self.keepalive_interval,
            keepalive_timeout: self.keepalive_timeout,
            drain_timeout: self.drain_timeout,
            ..ServerLimits::default()
        }
    }
}

/// The smallest `--max-message-bytes`: room for a request with the longest
/// client and resource ids a server accepts (1 KiB each) and more.
const MIN_MESSAGE_BYTES: usize = 4096;

/// A `--max-message-bytes` flag: a byte count of at least
/// [`MIN_MESSAGE_BYTES`].
fn message_bytes(text: &str) -> Result<usize, String> {
    let n: usize = text.trim().parse().map_err(|e| format!("{e}"))?;
    if n < MIN_MESSAGE_BYTES {
        return Err(format!(
            "must be at least {MIN_MESSAGE_BYTES} bytes: a request with one resource and the \
             longest ids (1 KiB each) takes about 2.1 KB, and a smaller limit refuses requests \
             clients cannot shrink"
        ));
    }
    Ok(n)
}

/// The signals `serve` handles, registered before anything else so that
/// none of them can kill the process with its default action.
struct Signals {
    shutdown: ShutdownSignals,
    hup: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            shutdown: ShutdownSignals::install()
                .context("installing the SIGTERM and SIGINT handlers")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }
}

/// Raises the soft limit on open files to the hard limit: each connection
/// is a file descriptor.
pub(crate) fn raise_fd_limit(want: usize) {
    // SAFETY: getrlimit and setrlimit only read and write the struct
    // passed by pointer, which lives on this stack frame.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        let have = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
        if have < want.saturating_add(64) {
            warn!(
                open_files = have,
                max_connections = want,
                "the open-file limit is below --max-connections: accept will back off on EMFILE"
            );
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    cli::block_on(args.threads, serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    // The files are read again when serving starts; reading them now
    // names a bad one before anything listens.
    if let Some(tls) = args.tls.tls() {
        tls.rustls_config()?;
        if let Some(problem) = tls.date_problem(std::time::SystemTime::now()) {
            warn!("{problem}");
        }
    }
    let limits = args.limits();
    raise_fd_limit(limits.max_connections);
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding gRPC port {addr}"))?;
    let local = listener.local_addr()?;
    let advertise = match (&args.advertise, &args.hostname) {
        (Some(address), _) => address.clone(),
        (None, Some(host)) if host.contains(':') && !host.starts_with('[') => {
            format!("[{host}]:{}", local.port())
        }
        (None, Some(host)) => format!("{host}:{}", local.port()),
        (None, None) => local.to_string(),
    };
    let identity = |tls: ClientTls, cert: &Option<PathBuf>, key: &Option<PathBuf>| match (cert, key)
    {
        (Some(cert), Some(key)) => tls.identity(cert, key),
        _ => tls,
    };
    let standalone = Standalone {
        config: args.config.clone(),
        reload_interval: args.reload_interval,
        debug: (args.debug_port != 0).then(|| SocketAddr::new(args.debug_host, args.debug_port)),
        advertise: Some(advertise),
        sweep_interval: args.sweep_interval,
        etcd_endpoints: args.etcd_endpoints.clone(),
        etcd_tls: args
            .etcd_tls_ca
            .as_ref()
            .map(|ca| identity(ClientTls::new(ca), &args.etcd_tls_cert, &args.etcd_tls_key)),
        election_key: args.election_key.clone(),
        election_ttl: args.election_ttl,
        parent: args.parent.as_ref().map(|address| Parent {
            address: address.clone(),
            server_id: args.server_id.clone().unwrap_or_default(),
            decay_factor: args.decay_factor,
        }),
        parent_tls: args.parent_tls_ca.as_ref().map(|ca| {
            identity(
                ClientTls::new(ca),
                &args.parent_tls_cert,
                &args.parent_tls_key,
            )
        }),
        tls: args.tls.tls(),
        limits,
        threads: Some(args.threads.unwrap_or_else(cli::cores)),
    };
    let Signals { shutdown, hup } = signals;
    standalone
        .run(
            listener,
            async move {
                shutdown.recv().await;
            },
            hup,
        )
        .await
        .map_err(anyhow::Error::from_boxed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_limit_below_the_minimum_is_refused() {
        assert_eq!(message_bytes("65536"), Ok(65536));
        assert_eq!(message_bytes("4096"), Ok(4096));
        let e = message_bytes("0").unwrap_err();
        assert!(e.starts_with("must be at least 4096 bytes"), "{e}");
        assert!(message_bytes("4095").is_err());
        assert!(message_bytes("-1").is_err());
    }
}
