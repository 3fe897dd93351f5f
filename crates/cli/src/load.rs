//! `tollgate load`: many simulated clients refreshing leases against a
//! capacity server (`load_lease.rs`), with `--mode allow` Allow calls
//! against a quota server (`load_allow.rs`), or with `--mode rls`
//! ShouldRateLimit calls against a rate limit service (`load_rls.rs`),
//! reporting calls per second,
//! latency percentiles and CPU time per call; both speak gRPC through
//! `load_wire.rs`.

use std::time::Duration;

use crate::cli;
use crate::load_wire;

/// What `tollgate load` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Doorman GetCapacity from many clients.
    Lease,
    /// quotaservice Allow calls.
    Allow,
    /// Envoy ShouldRateLimit calls.
    Rls,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Examples:\n  tollgate load --server 127.0.0.1:15000 --clients 5000 --duration 30s\n  \
    tollgate load --server 127.0.0.1:15000 --server-pid \"$(pidof tollgate)\"\n  \
    tollgate load --server localhost:15000 --tls-ca ca.pem\n  \
    tollgate load --mode allow --server 127.0.0.1:15100 --buckets 100 --concurrency 256\n  \
    tollgate load --mode allow --server 127.0.0.1:15100 --namespace svc --bucket db\n  \
    tollgate load --mode rls --server 127.0.0.1:8081 --domain load --descriptors 3 --values 100000")]
pub(crate) struct Args {
    /// What to load: a lease server, a quota server or a rate limit service.
    #[arg(long, value_enum, default_value_t = Mode::Lease)]
    mode: Mode,
    /// The server's gRPC address, `host:port` (default: 127.0.0.1:15000 for
    /// leases, 127.0.0.1:15100 for Allow).
    #[arg(long)]
    server: Option<String>,
    /// Allow mode: the namespace asked.
    #[arg(long, default_value = "load")]
    namespace: String,
    /// Allow mode: distinct bucket names (`b0`, `b1`, ...), asked round robin.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<usize>)]
    buckets: usize,
    /// Allow mode: ask this one bucket name instead of `b0`, `b1`, ...
    /// (e.g. a bucket named in the server's configuration).
    #[arg(long, conflicts_with = "buckets")]
    bucket: Option<String>,
    /// Rls mode: the domain asked.
    #[arg(long, default_value = "load")]
    domain: String,
    /// Rls mode: the key of every descriptor's one entry.
    #[arg(long, default_value = "remote_address")]
    key: String,
    /// Rls mode: descriptors per call.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<usize>)]
    descriptors: usize,
    /// Rls mode: distinct values (`v0`, `v1`, ...), used in turn.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<usize>)]
    values: usize,
    /// Rls mode: the request's hits_addend (0: unset, counted as 1).
    #[arg(long, default_value_t = 0)]
    hits_addend: u32,
    /// Allow mode: tokens per request.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<i64>)]
    tokens: i64,
    /// Number of simulated clients (distinct client ids).
    #[arg(long, default_value_t = 1000, value_parser = cli::positive::<usize>)]
    clients: usize,
    /// The resource every client asks for.
    #[arg(long, default_value = "load")]
    resource: String,
    /// How long to run, from when every caller has connected and every
    /// client asked once; calls unanswered at the end are abandoned (the
    /// report's `abandoned=`). A run in which no call succeeds exits 1.
    #[arg(long, default_value = "10s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    duration: Duration,
    /// RPCs in flight at once.
    #[arg(long, default_value_t = 64, value_parser = cli::positive::<usize>)]
    concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    #[arg(long, default_value_t = 4, value_parser = cli::positive::<usize>)]
    connections: usize,
    /// Threads, each running its own connections and callers (default:
    /// one per core).
    #[arg(long, value_parser = cli::positive::<usize>)]
    threads: Option<usize>,
    /// The server's process id, to report its CPU time per call beside
    /// the load's (read from /proc, Linux only).
    #[arg(long)]
    server_pid: Option<u32>,
    #[command(flatten)]
    tls: cli::ClientTlsArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    // Before the run, which a bad pid would otherwise lose at its end.
    if let Some(pid) = args.server_pid {
        load_wire::check_server_pid(pid)?;
    }
    let default_server = match args.mode {
        Mode::Lease => "127.0.0.1:15000",
        Mode::Allow => "127.0.0.1:15100",
        Mode::Rls => "127.0.0.1:8081",
    };
    let concurrency = match args.mode {
        // No more callers than clients: each caller owns some.
        Mode::Lease => args.concurrency.min(args.clients),
        Mode::Allow | Mode::Rls => args.concurrency,
    };
    let wire = load_wire::Params {
        server: args.server.unwrap_or_else(|| default_server.to_owned()),
        tls: args.tls.tls(),
        duration: args.duration,
        concurrency,
        connections: args.connections,
        threads: args.threads.unwrap_or_else(cli::cores),
        server_pid: args.server_pid,
    };
    match args.mode {
        Mode::Lease => crate::load_lease::run(
            crate::load_lease::Leases {
                clients: args.clients,
                resource: args.resource,
            },
            &wire,
        ),
        Mode::Allow => crate::load_allow::run(
            crate::load_allow::Params {
                namespace: args.namespace,
                bucket_names: match args.bucket {
                    Some(name) => vec![name],
                    None => (0..args.buckets).map(|i| format!("b{i}")).collect(),
                },
                tokens: args.tokens,
            },
            &wire,
        ),
        Mode::Rls => crate::load_rls::run(
            crate::load_rls::Params {
                domain: args.domain,
                key: args.key,
                descriptors: args.descriptors,
                values: args.values,
                hits_addend: args.hits_addend,
            },
            &wire,
        ),
    }
}
