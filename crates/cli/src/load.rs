//! `tollgate load`: many simulated clients refreshing leases against a
//! capacity server, reporting RPC/s and latency percentiles; with `--mode
//! allow`, Allow calls against a quota server (see `load_allow.rs`).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tonic::transport::{Channel, Endpoint};

use crate::cli;

/// What `tollgate load` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Doorman GetCapacity from many clients.
    Lease,
    /// quotaservice Allow calls.
    Allow,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Examples:\n  tollgate load --server 127.0.0.1:15000 --clients 5000 --duration 30s\n  \
    tollgate load --mode allow --server 127.0.0.1:15100 --buckets 100 --concurrency 256\n  \
    tollgate load --mode allow --server 127.0.0.1:15100 --namespace svc --bucket db")]
pub(crate) struct Args {
    /// What to load: a lease server or a quota server.
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
    /// Allow mode: tokens per request.
    #[arg(long, default_value_t = 1, value_parser = cli::positive::<i64>)]
    tokens: i64,
    /// Number of simulated clients (distinct client ids).
    #[arg(long, default_value_t = 1000, value_parser = cli::positive::<usize>)]
    clients: usize,
    /// The resource every client asks for.
    #[arg(long, default_value = "load")]
    resource: String,
    /// How long to run (after every client asked once).
    #[arg(long, default_value = "10s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    duration: Duration,
    /// RPCs in flight at once.
    #[arg(long, default_value_t = 64, value_parser = cli::positive::<usize>)]
    concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    #[arg(long, default_value_t = 4, value_parser = cli::positive::<usize>)]
    connections: usize,
    /// Tokio worker threads (default: one per core); in Allow mode, threads
    /// each running its own connections and callers.
    #[arg(long, value_parser = cli::positive::<usize>)]
    threads: Option<usize>,
    /// Allow mode: the quota server's process id, to report its CPU time
    /// per call beside the load's (read from /proc, Linux only).
    #[arg(long)]
    server_pid: Option<u32>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if args.mode == Mode::Allow {
        let threads = args.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        return crate::load_allow::run(crate::load_allow::Params {
            server: args.server.unwrap_or_else(|| "127.0.0.1:15100".to_owned()),
            namespace: args.namespace,
            bucket_names: match args.bucket {
                Some(name) => vec![name],
                None => (0..args.buckets).map(|i| format!("b{i}")).collect(),
            },
            tokens: args.tokens,
            duration: args.duration,
            concurrency: args.concurrency,
            connections: args.connections,
            threads,
            server_pid: args.server_pid,
        });
    }
    cli::block_on(args.threads, load(args))
}

/// What one worker measured.
struct Tally {
    latency_us: Histogram<u64>,
    errors: u64,
    redirects: u64,
}

/// Client `i`'s wants: spread over 1..=100 so the resource is contended.
fn wants(i: usize) -> f64 {
    (i % 100 + 1) as f64
}

async fn request(
    client: &mut CapacityClient<Channel>,
    id: &str,
    resource: &str,
    wants: f64,
    has: Option<f64>,
) -> Result<pb::GetCapacityResponse, tonic::Status> {
    let req = pb::GetCapacityRequest {
        client_id: id.to_owned(),
        resource: vec![pb::ResourceRequest {
            resource_id: resource.to_owned(),
            priority: 0,
            has: has.map(|capacity| pb::Lease {
                expiry_time: 0,
                refresh_interval: 0,
                capacity,
            }),
            wants,
        }],
    };
    client.get_capacity(req).await.map(|r| r.into_inner())
}

/// The capacity granted in a response, if any.
fn granted(r: &pb::GetCapacityResponse) -> Option<f64> {
    r.response.first().map(|r| r.gets.capacity)
}

async fn load(args: Args) -> anyhow::Result<()> {
    let server = args
        .server
        .clone()
        .unwrap_or_else(|| "127.0.0.1:15000".to_owned());
    let uri = if server.contains("://") {
        server.clone()
    } else {
        format!("http://{server}")
    };
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let ch = Endpoint::from_shared(uri.clone())?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to {server}"))?;
        channels.push(ch);
    }
    let workers = args.concurrency.min(args.clients);
    let ids: Vec<String> = (0..args.clients).map(|i| format!("load-{i}")).collect();

    // Every client asks once, so the server knows all of them before timing.
    let warm = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = CapacityClient::new(channels[w % channels.len()].clone());
        let mine: Vec<(usize, String)> = ids
            .iter()
            .enumerate()
            .skip(w)
            .step_by(workers)
            .map(|(i, id)| (i, id.clone()))
            .collect();
        let resource = args.resource.clone();
        tasks.push(tokio::spawn(async move {
            let mut has = Vec::with_capacity(mine.len());
            for (i, id) in &mine {
                let r = request(&mut client, id, &resource, wants(*i), None).await?;
                has.push(granted(&r));
            }
            anyhow::Ok((client, mine, has))
        }));
    }
    let mut prepared = Vec::new();
    for t in tasks {
        prepared.push(t.await??);
    }
    eprintln!(
        "{} clients registered in {:.2?}; running for {:?} with {} in flight over {} connections",
        args.clients,
        warm.elapsed(),
        args.duration,
        workers,
        channels.len()
    );

    let deadline = Instant::now() + args.duration;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (mut client, mine, mut has) in prepared {
        let resource = args.resource.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally {
                latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)
                    .expect("valid histogram bounds"),
                errors: 0,
                redirects: 0,
            };
            'run: loop {
                for (k, (i, id)) in mine.iter().enumerate() {
                    if Instant::now() >= deadline {
                        break 'run;
                    }
                    let t = Instant::now();
                    let r = request(&mut client, id, &resource, wants(*i), has[k]).await;
                    let us = t.elapsed().as_micros().max(1);
                    tally
                        .latency_us
                        .saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
                    match r {
                        Ok(r) if r.mastership.is_some() => tally.redirects += 1,
                        Ok(r) => has[k] = granted(&r),
                        Err(_) => tally.errors += 1,
                    }
                }
            }
            tally
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut errors, mut redirects) = (0, 0);
    for t in tasks {
        let tally = t.await?;
        all.add(&tally.latency_us)?;
        errors += tally.errors;
        redirects += tally.redirects;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = all.len();
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "rpcs={n} elapsed={elapsed:.2}s rate={:.0}/s errors={errors} redirects={redirects} \
         latency_ms p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        n as f64 / elapsed,
        ms(all.value_at_quantile(0.50)),
        ms(all.value_at_quantile(0.90)),
        ms(all.value_at_quantile(0.99)),
        ms(all.max()),
    );
    Ok(())
}
