//! `tollgate load --mode allow`: many concurrent Allow calls against a quota
//! server, on one bucket or spread over many bucket names, reporting Allow/s,
//! statuses and latency percentiles.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use tollgate::quota::pb::quota_service_client::QuotaServiceClient;
use tollgate::quota::pb::{allow_response, AllowRequest};
use tonic::transport::Endpoint;

/// What the Allow load needs from `tollgate load`'s arguments.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) server: String,
    pub(crate) namespace: String,
    pub(crate) buckets: usize,
    pub(crate) tokens: i64,
    pub(crate) duration: Duration,
    pub(crate) concurrency: usize,
    pub(crate) connections: usize,
}

/// What one worker measured.
struct Tally {
    latency_us: Histogram<u64>,
    by_status: [u64; 7],
    errors: u64,
}

pub(crate) async fn load(p: Params) -> anyhow::Result<()> {
    anyhow::ensure!(p.buckets >= 1, "--buckets must be at least 1");
    let uri = if p.server.contains("://") {
        p.server.clone()
    } else {
        format!("http://{}", p.server)
    };
    let mut channels = Vec::with_capacity(p.connections);
    for _ in 0..p.connections {
        let ch = Endpoint::from_shared(uri.clone())?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to {}", p.server))?;
        channels.push(ch);
    }
    let names: std::sync::Arc<[String]> = (0..p.buckets).map(|i| format!("b{i}")).collect();
    eprintln!(
        "Allow load on {} bucket name(s) in namespace {:?} for {:?}, {} in flight over {} connections",
        p.buckets,
        p.namespace,
        p.duration,
        p.concurrency,
        channels.len()
    );
    let cpu_start = cpu_seconds();
    let deadline = Instant::now() + p.duration;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..p.concurrency {
        let mut client = QuotaServiceClient::new(channels[w % channels.len()].clone());
        let names = std::sync::Arc::clone(&names);
        let namespace = p.namespace.clone();
        let step = p.concurrency;
        let tokens = p.tokens;
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally {
                latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)
                    .expect("valid histogram bounds"),
                by_status: [0; 7],
                errors: 0,
            };
            let mut k = w;
            while Instant::now() < deadline {
                let req = AllowRequest {
                    namespace: namespace.clone(),
                    bucket_name: names[k % names.len()].clone(),
                    tokens_requested: tokens,
                    max_wait_millis_override: 0,
                    max_wait_time_override: false,
                };
                k = k.wrapping_add(step);
                let t = Instant::now();
                let r = client.allow(req).await;
                let us = t.elapsed().as_micros().max(1);
                tally
                    .latency_us
                    .saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
                match r {
                    Ok(r) => {
                        let s = usize::try_from(r.get_ref().status).unwrap_or(6).min(6);
                        tally.by_status[s] += 1;
                    }
                    Err(_) => tally.errors += 1,
                }
            }
            tally
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut by_status = [0u64; 7];
    let mut errors = 0;
    for t in tasks {
        let tally = t.await?;
        all.add(&tally.latency_us)?;
        for (total, n) in by_status.iter_mut().zip(tally.by_status) {
            *total += n;
        }
        errors += tally.errors;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_start;
    let n = all.len();
    let ms = |us: u64| us as f64 / 1000.0;
    let statuses: Vec<String> = by_status
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(s, c)| {
            let name = allow_response::Status::try_from(s as i32).map_or("?", |s| s.as_str_name());
            format!("{name}={c}")
        })
        .collect();
    println!(
        "allows={n} elapsed={elapsed:.2}s rate={:.0}/s errors={errors} {} \
         load_cpu={cpu:.2}s latency_ms p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        n as f64 / elapsed,
        statuses.join(" "),
        ms(all.value_at_quantile(0.50)),
        ms(all.value_at_quantile(0.90)),
        ms(all.value_at_quantile(0.99)),
        ms(all.max()),
    );
    Ok(())
}

/// CPU time (user + system) this process has used, in seconds: with the
/// server's, it tells Allow/s per core on a machine shared with other work.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass, which is a plain
    // C struct for which all-zero bytes are a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
