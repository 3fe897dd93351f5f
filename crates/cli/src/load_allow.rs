//! `tollgate load --mode allow`: many concurrent Allow calls against a quota
//! server, on one bucket or spread over many bucket names, reporting Allow/s,
//! statuses, latency percentiles and CPU time per call (the load's own and,
//! with `--server-pid`, the server's).
//!
//! The load should cost less than the server, so it speaks gRPC with the
//! `h2` crate directly: one current-thread runtime per thread, each with its
//! own connections, every request body encoded once before the run, many
//! streams in flight per connection, and no tower buffer or task between a
//! caller and its connection.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use prost::Message as _;
use tollgate_quota::pb::{allow_response, AllowRequest, AllowResponse};
use tollgate_quota::ALLOW_PATH;
use tonic::codegen::http::{self, HeaderValue, Method, Uri};
use tonic::codegen::Bytes;

/// What the Allow load needs from `tollgate load`'s arguments.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) server: String,
    pub(crate) namespace: String,
    /// The bucket names asked, round robin.
    pub(crate) bucket_names: Vec<String>,
    pub(crate) tokens: i64,
    pub(crate) duration: Duration,
    pub(crate) concurrency: usize,
    pub(crate) connections: usize,
    pub(crate) threads: usize,
    pub(crate) server_pid: Option<u32>,
}

/// What one caller (or a whole thread) measured.
struct Tally {
    latency_us: Histogram<u64>,
    by_status: [u64; 7],
    errors: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)
                .expect("valid histogram bounds"),
            by_status: [0; 7],
            errors: 0,
        }
    }

    fn add(&mut self, other: &Tally) -> anyhow::Result<()> {
        self.latency_us.add(&other.latency_us)?;
        for (total, n) in self.by_status.iter_mut().zip(other.by_status) {
            *total += n;
        }
        self.errors += other.errors;
        Ok(())
    }
}

/// Every bucket name's request, gRPC-framed, in one buffer.
struct Bodies {
    all: Bytes,
    ends: Vec<usize>,
}

impl Bodies {
    fn new(namespace: &str, names: &[String], tokens: i64) -> Bodies {
        let mut all = Vec::new();
        let mut ends = Vec::with_capacity(names.len());
        for name in names {
            let req = AllowRequest {
                namespace: namespace.to_owned(),
                bucket_name: name.clone(),
                tokens_requested: tokens,
                max_wait_millis_override: 0,
                max_wait_time_override: false,
            };
            all.push(0);
            all.extend_from_slice(&(req.encoded_len() as u32).to_be_bytes());
            req.encode(&mut all).expect("a Vec grows");
            ends.push(all.len());
        }
        Bodies {
            all: Bytes::from(all),
            ends,
        }
    }

    /// AllowRequest `k`'s framed body (round robin over the names).
    fn get(&self, k: usize) -> Bytes {
        let i = k % self.ends.len();
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.all.slice(start..self.ends[i])
    }
}

/// Runs the load: `threads` threads share the connections and callers.
pub(crate) fn run(p: Params) -> anyhow::Result<()> {
    anyhow::ensure!(!p.bucket_names.is_empty(), "--buckets must be at least 1");
    let threads = p.threads.min(p.concurrency).max(1);
    let connections = p.connections.max(threads);
    let authority = p
        .server
        .split_once("://")
        .map_or(p.server.as_str(), |(_, rest)| rest)
        .trim_end_matches('/')
        .to_owned();
    let uri: Uri = format!("http://{authority}{ALLOW_PATH}")
        .parse()
        .with_context(|| format!("--server {:?} is not host:port", p.server))?;
    let bodies = std::sync::Arc::new(Bodies::new(&p.namespace, &p.bucket_names, p.tokens));
    let names = match p.bucket_names.as_slice() {
        [one] => format!("bucket {one:?}"),
        many => format!("{} bucket names", many.len()),
    };
    eprintln!(
        "Allow load on {names} in namespace {:?} for {:?}, {} in flight over {} connections, {} threads",
        p.namespace, p.duration, p.concurrency, connections, threads
    );
    let server_cpu_start = p.server_pid.map(process_cpu_seconds).transpose()?;
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    let deadline = start + p.duration;
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        // Thread t gets every threads-th connection and caller.
        let conns = (t..connections).step_by(threads).count();
        let callers = (t..p.concurrency).step_by(threads).count();
        let (authority, uri, bodies) = (authority.clone(), uri.clone(), bodies.clone());
        handles.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(thread_load(
                authority, uri, bodies, conns, callers, t, threads, deadline,
            ))
        }));
    }
    let mut all = Tally::new();
    for h in handles {
        let tally = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        all.add(&tally)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_start;
    let n = all.latency_us.len();
    let per_call_us = |cpu: f64| cpu * 1e6 / (n.max(1) as f64);
    let ms = |us: u64| us as f64 / 1000.0;
    let statuses: Vec<String> = all
        .by_status
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(s, c)| {
            let name = allow_response::Status::try_from(s as i32).map_or("?", |s| s.as_str_name());
            format!("{name}={c}")
        })
        .collect();
    let server = match (p.server_pid, server_cpu_start) {
        (Some(pid), Some(before)) => {
            let cpu = process_cpu_seconds(pid)? - before;
            format!(" server_cpu={cpu:.2}s ({:.1} us/call)", per_call_us(cpu))
        }
        _ => String::new(),
    };
    println!(
        "allows={n} elapsed={elapsed:.2}s rate={:.0}/s errors={} {} \
         load_cpu={cpu:.2}s ({:.1} us/call){server} latency_ms p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        n as f64 / elapsed,
        all.errors,
        statuses.join(" "),
        per_call_us(cpu),
        ms(all.latency_us.value_at_quantile(0.50)),
        ms(all.latency_us.value_at_quantile(0.90)),
        ms(all.latency_us.value_at_quantile(0.99)),
        ms(all.latency_us.max()),
    );
    Ok(())
}

/// One thread's share: its connections, and its callers spread over them.
#[allow(clippy::too_many_arguments)]
async fn thread_load(
    authority: String,
    uri: Uri,
    bodies: std::sync::Arc<Bodies>,
    conns: usize,
    callers: usize,
    first: usize,
    step: usize,
    deadline: Instant,
) -> anyhow::Result<Tally> {
    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        tcp.set_nodelay(true)?;
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 22)
            .handshake::<_, Bytes>(tcp)
            .await
            .with_context(|| format!("HTTP/2 handshake with {authority}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        senders.push(send);
    }
    let mut tasks = Vec::with_capacity(callers);
    for c in 0..callers {
        let send = senders[c % senders.len()].clone();
        let (uri, bodies) = (uri.clone(), bodies.clone());
        // Caller c of this thread is caller first + c * step overall.
        let (k0, kstep) = (first + c * step, callers * step);
        tasks.push(tokio::spawn(caller(send, uri, bodies, k0, kstep, deadline)));
    }
    let mut all = Tally::new();
    for t in tasks {
        all.add(&t.await?)?;
    }
    Ok(all)
}

/// One caller: a call at a time until the deadline.
async fn caller(
    mut send: h2::client::SendRequest<Bytes>,
    uri: Uri,
    bodies: std::sync::Arc<Bodies>,
    mut k: usize,
    step: usize,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::new();
    loop {
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        let body = bodies.get(k);
        k = k.wrapping_add(step);
        let r = call(&mut send, &uri, body).await;
        let us = t.elapsed().as_micros().max(1);
        tally
            .latency_us
            .saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
        match r {
            Ok(status) => tally.by_status[usize::try_from(status).unwrap_or(6).min(6)] += 1,
            Err(_) => tally.errors += 1,
        }
    }
    tally
}

/// One Allow call; its response's status.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    uri: &Uri,
    body: Bytes,
) -> anyhow::Result<i32> {
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    let mut req = http::Request::new(());
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri.clone();
    let h = req.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(http::header::TE, HeaderValue::from_static("trailers"));
    let (response, mut stream) = send.send_request(req, false)?;
    stream.send_data(body, true)?;
    let (head, mut body) = response.await?.into_parts();
    anyhow::ensure!(head.status == http::StatusCode::OK, "HTTP {}", head.status);
    let mut message = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?;
    let grpc_status = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.headers.get("grpc-status"));
    anyhow::ensure!(
        grpc_status.is_some_and(|s| s == "0"),
        "gRPC status {grpc_status:?}"
    );
    let payload = message.get(5..).context("short response")?;
    Ok(AllowResponse::decode(payload)?.status)
}

/// CPU time (user + system) this process has used, in seconds.
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

/// CPU time (user + system) process `pid` has used, in seconds, from
/// `/proc/PID/stat` (Linux).
fn process_cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14 and stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("unexpected {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i - 3)
            .with_context(|| format!("unexpected {path}"))?
            .parse::<f64>()?)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok((ticks(14)? + ticks(15)?) / hz)
}
