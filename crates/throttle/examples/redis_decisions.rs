//! Decisions per second and their latency through a throttler whose keyed
//! state is in Redis (one script call per decision), for one hot key or
//! many distinct keys.
//!
//! ```text
//! redis-server --port 6390 --save '' --appendonly no &
//! cargo run --release -p tollgate-throttle --example redis_decisions -- \
//!     redis://127.0.0.1:6390 KEYS SECONDS TASKS POLICY \
//!     [--limit N] [--slice N] [--replicas N]
//! ```
//!
//! `KEYS` distinct API keys (1 for a hot key; default 1), each decided in
//! turn by `TASKS` concurrent tasks (default 64) for `SECONDS` (default
//! 10), on tokio's multi-threaded runtime, through one rule far above the
//! load (every decision admitted, so each is a full read and write of the
//! key): `POLICY` `fw` (default), a fixed window of a billion an hour, so
//! every key stays in Redis to the hour's end, or `gcra`, a GCRA of a
//! million a second with a burst of a million. Prints decisions per
//! second, the p50, p99 and p99.9 latency of one decision, the keys Redis
//! holds and its memory per key.
//!
//! `--limit N`: the fixed window admits N a second instead (`swc`: a
//! sliding window counter of N a second), so a hot key is contended.
//! `--slice N`: the rule takes slices of N tokens. `--replicas N`: N
//! throttlers, each with its own store (connections, slices), the tasks
//! spread over them in turn. A second line gives the script calls Redis
//! ran (`INFO commandstats`), the requests admitted, the calls per
//! admitted request and how many each replica admitted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Request;
use hdrhistogram::Histogram;
use tollgate_throttle::{
    Extract, FixedWindow, Gcra, Limit, OnError, RedisStore, RequestHead, Rule,
    SlidingWindowCounter, Throttler,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = Vec::new();
    let (mut per_second, mut slice, mut replicas) = (None, 0u64, 1usize);
    let mut all_args = std::env::args();
    while let Some(arg) = all_args.next() {
        let mut value = || all_args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--limit" => per_second = Some(value()?.parse::<u64>()?),
            "--slice" => slice = value()?.parse()?,
            "--replicas" => replicas = value()?.parse::<usize>()?.max(1),
            _ => args.push(arg),
        }
    }
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let keys: u64 = args.get(2).map_or(Ok(1), |s| s.parse())?;
    let seconds: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let tasks: u64 = args.get(4).map_or(Ok(64), |s| s.parse())?;
    let second = Duration::from_secs(1);
    let limit = match (args.get(5).map_or("fw", String::as_str), per_second) {
        ("fw", None) => {
            Limit::FixedWindow(FixedWindow::new(1_000_000_000, Duration::from_secs(3600))?)
        }
        ("fw", Some(n)) => Limit::FixedWindow(FixedWindow::new(n, second)?),
        ("swc", n) => Limit::SlidingWindowCounter(SlidingWindowCounter::new(
            n.unwrap_or(1_000_000_000),
            second,
        )?),
        ("gcra", _) => Limit::Gcra(Gcra::new("1000000".parse()?, 1_000_000, 0)?),
        (other, _) => return Err(format!("POLICY \"{other}\" is none of fw, swc, gcra").into()),
    };

    let client = redis::Client::open(url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut admin).await?;
    let base: u64 = used_memory(&mut admin).await?;

    let mut throttlers = Vec::new();
    for _ in 0..replicas {
        let store = RedisStore::builder(url.as_str())
            // Measured, not failed over: a generous deadline.
            .deadline(Duration::from_secs(1))
            .on_error(OnError::Deny)
            .connect()
            .await?;
        throttlers.push(
            Throttler::builder()
                .rule(Rule::new("bench", Extract::header("x-api-key"), limit.clone()).slice(slice))
                .store(store)
                .try_build()?,
        );
    }
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new((0..replicas).map(|_| AtomicU64::new(0)).collect());
    let calls_before = script_calls(&mut admin).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let next_key = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let all = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let start = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let replica = task as usize % replicas;
        let admitted = admitted.clone();
        let (throttler, stop, next_key, failed, all) = (
            throttlers[replica].clone(),
            stop.clone(),
            next_key.clone(),
            failed.clone(),
            all.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("a histogram");
            // Relaxed: a stop flag and a key counter; nothing else is
            // published through them.
            while !stop.load(Ordering::Relaxed) {
                let key = next_key.fetch_add(1, Ordering::Relaxed) % keys;
                let req = Request::builder()
                    .header("x-api-key", key.to_string())
                    .body(())
                    .expect("a request");
                let t = Instant::now();
                let ok = throttler.decide(&RequestHead::of(&req)).await.is_ok();
                hist.record(t.elapsed().as_nanos() as u64)
                    .expect("in range");
                if ok {
                    admitted[replica].fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            all.lock()
                .expect("unpoisoned")
                .add(&hist)
                .expect("same bounds");
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let hist = all.lock().expect("unpoisoned").clone();
    let held: u64 = redis::cmd("DBSIZE").query_async(&mut admin).await?;
    let memory = used_memory(&mut admin).await?;
    println!(
        "{keys} keys, {tasks} tasks, {seconds} s: {:.0} decisions/s, p50 {:.0} us, p99 {:.0} us, \
         p99.9 {:.0} us, {} not admitted; redis holds {held} keys, {:.0} bytes each",
        hist.len() as f64 / elapsed,
        hist.value_at_quantile(0.5) as f64 / 1e3,
        hist.value_at_quantile(0.99) as f64 / 1e3,
        hist.value_at_quantile(0.999) as f64 / 1e3,
        failed.load(Ordering::Relaxed),
        (memory.saturating_sub(base)) as f64 / held.max(1) as f64,
    );
    let calls = script_calls(&mut admin).await? - calls_before;
    let each: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let total: u64 = each.iter().sum();
    println!(
        "slice {slice}, {replicas} replicas: {calls} script calls, {total} admitted \
         ({:.0}/s), {:.4} calls per admitted request; admitted per replica {each:?}",
        total as f64 / elapsed,
        calls as f64 / total.max(1) as f64,
    );
    Ok(())
}

/// The scripts Redis ran: `EVALSHA` and `EVAL` calls, less the failed ones
/// (a first `EVALSHA` before the script is loaded).
async fn script_calls(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<u64, Box<dyn std::error::Error>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let field = |line: &str, name: &str| -> u64 {
        line.split([':', ','])
            .find_map(|f| f.strip_prefix(name))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| field(l, "calls=") - field(l, "failed_calls="))
        .sum())
}

/// Redis' `used_memory`, in bytes.
async fn used_memory(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<u64, Box<dyn std::error::Error>> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .ok_or("no used_memory in INFO")?
        .trim()
        .parse()
        .map_err(Into::into)
}
