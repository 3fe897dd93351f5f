//! What `tollgate load`'s modes share: the gRPC client the load speaks,
//! the threads and callers that drive it, and the report with CPU time per
//! call (the load's own and, with `--server-pid`, the server's).
//!
//! The load should cost less than the server it measures. Over plaintext
//! it speaks HTTP/2 with its own client (`load_h2.rs`): one task per
//! connection drives every caller on it, so one read brings many answers
//! and one write sends the next requests. Over TLS it speaks through the
//! full client (`grpc_client.rs`, on `h2`):
//! a task per caller, many streams in flight per connection. Either way
//! each thread runs a current-thread runtime of its own connections. A
//! mode says what its callers send and how to read the answers
//! ([`Workload`]); one that sends requests encoded before the run, in
//! turn, says only how to read them ([`Cycled`]).
//!
//! The run starts when every caller has connected and warmed up: the first
//! caller past the barrier sets the start, and every caller stops at the
//! same deadline, `--duration` after it. A call still unanswered then is
//! abandoned (and counted as such), so a server that cannot keep up, or
//! callers queued behind the connections' stream limits, cannot stretch
//! the run.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::grpc_client::{GrpcConnection, GrpcTarget};
use anyhow::Context as _;
use hdrhistogram::Histogram;
use tollgate_service::ClientTls;

use crate::load_h2;
use tonic::codegen::http::Uri;
use tonic::codegen::Bytes;

/// What one mode's callers send and how they read the answers.
pub(crate) trait Workload: Send + Sync + 'static {
    /// What one caller keeps between its calls.
    type Caller: Send + 'static;

    /// The method called, as an HTTP/2 path.
    const PATH: &'static str;

    /// The names of the outcomes [`response`](Self::response) counts.
    const OUTCOMES: &'static [&'static str];

    /// Caller `k`'s state, of `n` callers.
    fn caller(&self, k: usize, n: usize) -> Self::Caller;

    /// How many calls the caller makes before the timed run (to register
    /// its clients, say).
    fn warm_up(&self, caller: &Self::Caller) -> usize;

    /// The caller's next request message, gRPC-framed.
    fn request(&self, caller: &mut Self::Caller) -> Bytes;

    /// Reads the answer to the caller's last request: the index of its
    /// outcome in [`OUTCOMES`](Self::OUTCOMES).
    ///
    /// # Errors
    ///
    /// A message that does not decode.
    fn response(&self, caller: &mut Self::Caller, message: &[u8]) -> anyhow::Result<usize>;
}

/// A mode that sends requests encoded once before the run, in turn: what
/// it calls and how it reads the answers ([`Cycle`] does the rest).
pub(crate) trait Cycled: Send + Sync + 'static {
    /// The method called, as an HTTP/2 path.
    const PATH: &'static str;

    /// The names of the outcomes [`outcome`](Self::outcome) counts.
    const OUTCOMES: &'static [&'static str];

    /// Reads one answer: the index of its outcome in
    /// [`OUTCOMES`](Self::OUTCOMES).
    ///
    /// # Errors
    ///
    /// A message that does not decode.
    fn outcome(message: &[u8]) -> anyhow::Result<usize>;
}

/// Requests gRPC-framed in one buffer, sent in turn: caller `k` of `n`
/// sends request `k`, then `k + n`, `k + 2n`, ... (modulo their number),
/// so that the callers together go round them all.
pub(crate) struct Cycle<C> {
    all: Bytes,
    ends: Vec<usize>,
    calls: std::marker::PhantomData<fn() -> C>,
}

impl<C: Cycled> Cycle<C> {
    /// `requests`, framed once (at least one).
    pub(crate) fn new<M: prost::Message>(requests: impl IntoIterator<Item = M>) -> Cycle<C> {
        let mut all = Vec::new();
        let mut ends = Vec::new();
        for req in requests {
            all.extend_from_slice(&crate::grpc_client::grpc_frame(&req));
            ends.push(all.len());
        }
        assert!(!ends.is_empty(), "a load sends at least one request");
        Cycle {
            all: Bytes::from(all),
            ends,
            calls: std::marker::PhantomData,
        }
    }

    /// Request `k`'s framed body (round robin over the requests).
    fn get(&self, k: usize) -> Bytes {
        let i = k % self.ends.len();
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.all.slice(start..self.ends[i])
    }
}

impl<C: Cycled> Workload for Cycle<C> {
    /// The caller's next request number, and the step to the one after.
    type Caller = (usize, usize);

    const PATH: &'static str = C::PATH;

    const OUTCOMES: &'static [&'static str] = C::OUTCOMES;

    fn caller(&self, k: usize, n: usize) -> (usize, usize) {
        (k, n)
    }

    fn warm_up(&self, _: &(usize, usize)) -> usize {
        0
    }

    fn request(&self, (k, step): &mut (usize, usize)) -> Bytes {
        let body = self.get(*k);
        *k = k.wrapping_add(*step);
        body
    }

    fn response(&self, _: &mut (usize, usize), message: &[u8]) -> anyhow::Result<usize> {
        C::outcome(message)
    }
}

/// How to run a load.
#[derive(Debug)]
pub(crate) struct Params {
    /// The server's address, `host:port` (an `http://` or `https://`
    /// prefix is ignored).
    pub(crate) server: String,
    pub(crate) tls: Option<ClientTls>,
    pub(crate) duration: Duration,
    pub(crate) concurrency: usize,
    pub(crate) connections: usize,
    pub(crate) threads: usize,
    pub(crate) server_pid: Option<u32>,
}

/// What one caller (or a whole run) measured.
struct Tally {
    latency_us: Histogram<u64>,
    outcomes: Vec<u64>,
    errors: u64,
    /// Calls in flight at the deadline, given up on.
    abandoned: u64,
    /// The first error's description, for the report.
    first_error: Option<String>,
}

impl Tally {
    fn new(outcomes: usize) -> Tally {
        Tally {
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)
                .expect("valid histogram bounds"),
            outcomes: vec![0; outcomes],
            errors: 0,
            abandoned: 0,
            first_error: None,
        }
    }

    fn add(&mut self, other: Tally) -> anyhow::Result<()> {
        self.latency_us.add(&other.latency_us)?;
        for (total, n) in self.outcomes.iter_mut().zip(other.outcomes) {
            *total += n;
        }
        self.errors += other.errors;
        self.abandoned += other.abandoned;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        Ok(())
    }
}

/// Where to dial and how.
#[derive(Clone)]
struct Dial {
    target: GrpcTarget,
    /// The method's URI on the target.
    uri: Uri,
    /// `host:port` when plaintext: the load's own client
    /// (`load_h2.rs`) speaks to it.
    plain: Option<String>,
}

/// Runs `work` as `p` says and prints one line: calls (named `noun`),
/// rate, errors, outcomes, CPU time per call and latency percentiles.
///
/// # Errors
///
/// A thread that fails before the run, and a run in which no call
/// succeeded.
pub(crate) fn run<W: Workload>(work: W, p: &Params, noun: &str) -> anyhow::Result<()> {
    let threads = p.threads.min(p.concurrency).max(1);
    let connections = p.connections.max(threads);
    let dial = dial::<W>(p)?;
    let work = Arc::new(work);
    // Every caller (plaintext: every connection, which drives its
    // callers), and this thread, meet after the warm-up.
    let parties = if dial.plain.is_some() {
        (0..threads)
            .map(|t| {
                let conns = (t..connections).step_by(threads).count();
                conns.min((t..p.concurrency).step_by(threads).count())
            })
            .sum()
    } else {
        p.concurrency
    };
    let warmed = Arc::new(tokio::sync::Barrier::new(parties + 1));
    // The run's start: set by the first past the barrier.
    let run_start = Arc::new(OnceLock::new());
    let started = Instant::now();
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        // Thread t gets every threads-th connection and caller.
        let conns = (t..connections).step_by(threads).count();
        let callers: Vec<usize> = (t..p.concurrency).step_by(threads).collect();
        let (dial, work, warmed) = (dial.clone(), Arc::clone(&work), Arc::clone(&warmed));
        let run = Run {
            n: p.concurrency,
            warmed,
            start: Arc::clone(&run_start),
            duration: p.duration,
        };
        handles.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(thread_load(dial, work, conns, callers, run))
        }));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    // A thread that fails before its callers reach the barrier would leave
    // this wait hanging: watch for finished threads meanwhile.
    let all_warm = rt.block_on(async {
        let wait = warmed.wait();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => return true,
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if handles.iter().any(std::thread::JoinHandle::is_finished) {
                        return false;
                    }
                }
            }
        }
    });
    if !all_warm {
        // A thread ended before the run began: report why; the others are
        // left waiting, and end with the process.
        let failed = handles
            .into_iter()
            .find(std::thread::JoinHandle::is_finished);
        return match failed.map(std::thread::JoinHandle::join) {
            Some(Ok(Err(e))) => Err(e),
            _ => Err(anyhow::anyhow!("a load thread ended before the run began")),
        };
    }
    {
        eprintln!(
            "warmed up in {:.2?}; running for {:?} with {} in flight over {} connections, {} threads",
            started.elapsed(),
            p.duration,
            p.concurrency,
            connections,
            threads
        );
    }
    let server_cpu_start = p.server_pid.map(process_cpu_seconds).transpose()?;
    let cpu_start = cpu_seconds();
    let start = *run_start.get_or_init(Instant::now);
    let mut all = Tally::new(W::OUTCOMES.len());
    for h in handles {
        let tally = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        all.add(tally)?;
    }
    // No call counts after the deadline: the run is at most --duration
    // long, however long the callers took to wind down.
    let elapsed = start.elapsed().min(p.duration).as_secs_f64();
    let cpu = cpu_seconds() - cpu_start;
    let n = all.latency_us.len();
    let per_call_us = |cpu: f64| cpu * 1e6 / (n.max(1) as f64);
    let ms = |us: u64| us as f64 / 1000.0;
    let outcomes: Vec<String> = W::OUTCOMES
        .iter()
        .zip(&all.outcomes)
        .filter(|(_, &c)| c > 0)
        .map(|(name, c)| format!("{name}={c}"))
        .collect();
    let server = match (p.server_pid, server_cpu_start) {
        (Some(pid), Some(before)) => {
            let cpu = process_cpu_seconds(pid)? - before;
            format!(" server_cpu={cpu:.2}s ({:.1} us/call)", per_call_us(cpu))
        }
        _ => String::new(),
    };
    let abandoned = if all.abandoned > 0 {
        format!(" abandoned={}", all.abandoned)
    } else {
        String::new()
    };
    println!(
        "{noun}={n} elapsed={elapsed:.2}s rate={:.0}/s errors={}{abandoned} {} \
         load_cpu={cpu:.2}s ({:.1} us/call){server} latency_ms p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        n as f64 / elapsed,
        all.errors,
        outcomes.join(" "),
        per_call_us(cpu),
        ms(all.latency_us.value_at_quantile(0.50)),
        ms(all.latency_us.value_at_quantile(0.90)),
        ms(all.latency_us.value_at_quantile(0.99)),
        ms(all.latency_us.max()),
    );
    verdict(n, all.errors, all.abandoned, all.first_error.as_deref(), p)
}

/// The run's outcome: an error when no call succeeded (every call failed,
/// or none was answered in time), naming the first error.
fn verdict(
    calls: u64,
    errors: u64,
    abandoned: u64,
    first_error: Option<&str>,
    p: &Params,
) -> anyhow::Result<()> {
    match (calls, first_error) {
        (0, _) => anyhow::bail!(
            "no call was answered within --duration {} ({abandoned} abandoned): is {} a \
             server of this kind, and not overloaded?",
            humantime::format_duration(p.duration),
            p.server
        ),
        (n, Some(e)) if errors == n => anyhow::bail!(
            "every call failed ({errors} errors); the first: {e} (is {} a server of this kind?)",
            p.server
        ),
        (_, Some(e)) => {
            eprintln!("first error: {e}");
            Ok(())
        }
        (_, None) => Ok(()),
    }
}

/// What every caller shares about the run.
struct Run {
    /// Callers in all.
    n: usize,
    /// Where every caller, and the main thread, meet after the warm-up.
    warmed: Arc<tokio::sync::Barrier>,
    /// When the run started, set by the first past the barrier.
    start: Arc<OnceLock<Instant>>,
    duration: Duration,
}

/// Where and how `p` says to dial, for `W`'s method.
fn dial<W: Workload>(p: &Params) -> anyhow::Result<Dial> {
    let target = GrpcTarget::new(&p.server, p.tls.as_ref())?;
    let uri = target.uri(W::PATH)?;
    let plain = p.tls.is_none().then(|| {
        p.server
            .split_once("://")
            .map_or(p.server.as_str(), |(_, rest)| rest)
            .trim_end_matches('/')
            .to_owned()
    });
    Ok(Dial { target, uri, plain })
}

/// One thread's share: its connections, and its callers spread over them.
async fn thread_load<W: Workload>(
    dial: Dial,
    work: Arc<W>,
    conns: usize,
    callers: Vec<usize>,
    run: Run,
) -> anyhow::Result<Tally> {
    if let Some(authority) = &dial.plain {
        return plain_load(&dial, authority, work, conns, callers, run).await;
    }
    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        senders.push(dial.target.connect().await?);
    }
    // One tally for the thread's callers, not one each: a latency histogram
    // is about 140 KiB, and a hundred thousand callers would need 14 GB.
    // Uncontended: the callers take turns on this thread.
    let tally = Arc::new(Mutex::new(Tally::new(W::OUTCOMES.len())));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, k) in callers.into_iter().enumerate() {
        let send = senders[i % senders.len()].clone();
        let state = work.caller(k, run.n);
        let (uri, work, tally) = (dial.uri.clone(), Arc::clone(&work), Arc::clone(&tally));
        let (warmed, start) = (Arc::clone(&run.warmed), Arc::clone(&run.start));
        tasks.spawn(caller(
            send,
            uri,
            work,
            state,
            (warmed, start, run.duration),
            tally,
        ));
    }
    // The first caller to fail ends the thread (and the set, its callers).
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    drop(tasks);
    let tally =
        Arc::try_unwrap(tally).map_err(|_| anyhow::anyhow!("a caller outlived its thread"))?;
    Ok(tally.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// One thread's share over plaintext: a task per connection, each driving
/// its callers with the load's own client (`load_h2.rs`).
async fn plain_load<W: Workload>(
    dial: &Dial,
    authority: &str,
    work: Arc<W>,
    conns: usize,
    callers: Vec<usize>,
    run: Run,
) -> anyhow::Result<Tally> {
    let conns = conns.min(callers.len()).max(1);
    let mut shares = vec![Vec::new(); conns];
    for (i, k) in callers.into_iter().enumerate() {
        shares[i % conns].push(k);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for share in shares.into_iter().filter(|s| !s.is_empty()) {
        let conn = load_h2::Conn::connect(authority, W::PATH)
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        let (work, warmed, start) = (
            Arc::clone(&work),
            Arc::clone(&run.warmed),
            Arc::clone(&run.start),
        );
        let (n, duration) = (run.n, run.duration);
        tasks.spawn(async move {
            let states = share.iter().map(|&k| work.caller(k, n)).collect();
            connection_load(conn, &*work, states, (warmed, start, duration)).await
        });
    }
    let mut all = Tally::new(W::OUTCOMES.len());
    // The first connection to fail ends the thread (and the set, the
    // others).
    while let Some(done) = tasks.join_next().await {
        all.add(done??)?;
    }
    if all.errors > 0 && all.first_error.is_none() {
        all.first_error = Some(diagnose(dial, &*work, run.n).await);
    }
    Ok(all)
}

/// What a failed call's status was, asked once through the full client:
/// the load's own does not decode header blocks.
async fn diagnose<W: Workload>(dial: &Dial, work: &W, n: usize) -> String {
    let mut state = work.caller(0, n);
    let call = async {
        let mut conn = dial.target.connect().await?;
        conn.call(&dial.uri, work.request(&mut state)).await
    };
    match tokio::time::timeout(Duration::from_secs(5), call).await {
        Ok(Err(e)) => format!("{:#}", anyhow::Error::from(e)),
        Ok(Ok(_)) => "a call ended without a response message".to_owned(),
        Err(_) => "a call ended without a response message (no status within 5s)".to_owned(),
    }
}

/// One connection's callers: their warm-up calls, then each a call at a
/// time until the run's end, every request the callers have ready leaving
/// in one write; calls unanswered at the end are abandoned.
async fn connection_load<W: Workload>(
    mut conn: load_h2::Conn,
    work: &W,
    mut states: Vec<W::Caller>,
    (warmed, start, duration): (Arc<tokio::sync::Barrier>, Arc<OnceLock<Instant>>, Duration),
) -> anyhow::Result<Tally> {
    let mut tally = Tally::new(W::OUTCOMES.len());
    let mut warm: Vec<usize> = states.iter().map(|s| work.warm_up(s)).collect();
    let mut failed = None;
    let ready = (0..states.len()).filter(|&i| warm[i] > 0).collect();
    calls(&mut conn, work, &mut states, ready, None, |i, _, answer| {
        if let Err(e) = answer {
            failed.get_or_insert(e);
        }
        warm[i] -= 1;
        warm[i] > 0
    })
    .await?;
    if let Some(e) = failed {
        // Ends the thread, which ends the run.
        return Err(e.context("warming up"));
    }
    warmed.wait().await;
    let deadline = *start.get_or_init(Instant::now) + duration;
    let ready = (0..states.len()).collect();
    tally.abandoned += calls(
        &mut conn,
        work,
        &mut states,
        ready,
        Some(deadline),
        |_, us, answer| {
            tally.latency_us.saturating_record(us);
            match answer {
                Ok(outcome) => tally.outcomes[outcome] += 1,
                Err(_) => tally.errors += 1,
            }
            Instant::now() < deadline
        },
    )
    .await? as u64;
    Ok(tally)
}

/// Calls on `conn` for the callers in `ready` until none is left: each
/// answer goes to `answered` (the caller, the call's latency in µs, its
/// outcome or error), which says whether that caller calls again. Returns
/// the calls abandoned at `deadline`.
async fn calls<W: Workload>(
    conn: &mut load_h2::Conn,
    work: &W,
    states: &mut [W::Caller],
    mut ready: std::collections::VecDeque<usize>,
    deadline: Option<Instant>,
    mut answered: impl FnMut(usize, u64, anyhow::Result<usize>) -> bool,
) -> anyhow::Result<usize> {
    let mut sent_at = vec![Instant::now(); states.len()];
    // A request made while the connection had no room for it.
    let mut held: Option<(usize, Bytes)> = None;
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    let end = tokio::time::sleep_until(deadline.unwrap_or(far).into());
    tokio::pin!(end);
    loop {
        let now = Instant::now();
        loop {
            let (i, body) = match held.take() {
                Some(h) => h,
                None => match ready.pop_front() {
                    Some(i) => (i, work.request(&mut states[i])),
                    None => break,
                },
            };
            if !conn.has_room(body.len()) {
                held = Some((i, body));
                break;
            }
            conn.request(i, &body)?;
            sent_at[i] = now;
        }
        conn.flush().await?;
        if conn.in_flight() == 0 && held.is_none() {
            return Ok(0);
        }
        tokio::select! {
            read = conn.fill() => read?,
            // Calls waiting for room on the connection were started too.
            () = &mut end => return Ok(conn.in_flight() + ready.len() + usize::from(held.is_some())),
        }
        let now = Instant::now();
        conn.frames(|i, answer| {
            let us = now.duration_since(sent_at[i]).as_micros().max(1);
            let outcome = match answer {
                load_h2::Answer::Message(m) => work.response(&mut states[i], m),
                load_h2::Answer::Failed(why) => Err(anyhow::anyhow!(why)),
            };
            if answered(i, u64::try_from(us).unwrap_or(u64::MAX), outcome) {
                ready.push_back(i);
            }
        })?;
    }
}

/// One caller: its warm-up calls, then a call at a time until the run's
/// end; a call unanswered at the end is abandoned.
async fn caller<W: Workload>(
    mut send: GrpcConnection,
    uri: Uri,
    work: Arc<W>,
    mut state: W::Caller,
    (warmed, start, duration): (Arc<tokio::sync::Barrier>, Arc<OnceLock<Instant>>, Duration),
    tally: Arc<Mutex<Tally>>,
) -> anyhow::Result<()> {
    for _ in 0..work.warm_up(&state) {
        let answered = send
            .call(&uri, work.request(&mut state))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|message| work.response(&mut state, &message));
        if let Err(e) = answered {
            // Ends the thread, which ends the run.
            return Err(e.context("warming up"));
        }
    }
    warmed.wait().await;
    let deadline = *start.get_or_init(Instant::now) + duration;
    let tally = || tally.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        let body = work.request(&mut state);
        let call = send.call(&uri, body);
        let Ok(r) = tokio::time::timeout_at(deadline.into(), call).await else {
            tally().abandoned += 1;
            break;
        };
        let us = t.elapsed().as_micros().max(1);
        let answer = r
            .map_err(anyhow::Error::from)
            .and_then(|m| work.response(&mut state, &m));
        let mut tally = tally();
        tally
            .latency_us
            .saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
        match answer {
            Ok(outcome) => tally.outcomes[outcome] += 1,
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    Ok(())
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

/// Checks, before a run, that the server's CPU time can be read.
///
/// # Errors
///
/// When `pid` names no process (or its `/proc` entry cannot be read).
pub(crate) fn check_server_pid(pid: u32) -> anyhow::Result<()> {
    process_cpu_seconds(pid)
        .map(drop)
        .with_context(|| format!("--server-pid {pid}: cannot read the process's CPU time"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            server: "127.0.0.1:15000".into(),
            tls: None,
            duration: Duration::from_secs(1),
            concurrency: 1,
            connections: 1,
            threads: 1,
            server_pid: None,
        }
    }

    #[test]
    fn a_run_without_one_success_is_an_error() {
        let p = params();
        assert!(verdict(10, 0, 0, None, &p).is_ok());
        assert!(verdict(10, 9, 0, Some("gRPC status 12: x"), &p).is_ok());
        assert_eq!(
            verdict(10, 10, 0, Some("gRPC status 12: unknown method"), &p)
                .unwrap_err()
                .to_string(),
            "every call failed (10 errors); the first: gRPC status 12: unknown method \
             (is 127.0.0.1:15000 a server of this kind?)"
        );
        assert_eq!(
            verdict(0, 0, 64, None, &p).unwrap_err().to_string(),
            "no call was answered within --duration 1s (64 abandoned): is 127.0.0.1:15000 a \
             server of this kind, and not overloaded?"
        );
    }

    /// A mode whose answers all count as one outcome.
    struct Echo;

    impl Cycled for Echo {
        const PATH: &'static str = "/echo";
        const OUTCOMES: &'static [&'static str] = &["answered"];

        fn outcome(_: &[u8]) -> anyhow::Result<usize> {
            Ok(0)
        }
    }

    #[test]
    fn callers_go_round_the_requests_together() {
        let cycle = Cycle::<Echo>::new(["a", "b", "c"].map(String::from));
        let frame = |s: &str| crate::grpc_client::grpc_frame(&s.to_owned());
        let mut first = cycle.caller(0, 2);
        let mut second = cycle.caller(1, 2);
        let sent: Vec<Bytes> = (0..3)
            .flat_map(|_| [cycle.request(&mut first), cycle.request(&mut second)])
            .collect();
        let want: Vec<Bytes> = ["a", "b", "c", "a", "b", "c"].map(frame).into();
        assert_eq!(sent, want);
        assert_eq!(cycle.warm_up(&first), 0);
        assert_eq!(cycle.response(&mut first, b"").unwrap(), 0);
    }
}
