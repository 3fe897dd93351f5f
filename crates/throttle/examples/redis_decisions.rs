//! Decisions per second and their latency through a throttler whose keyed
//! state is in Redis (one script call per decision), for one hot key or
//! many distinct keys.
//!
//! ```text
//! redis-server --port 6390 --save '' --appendonly no &
//! cargo run --release -p tollgate-throttle --example redis_decisions -- \
//!     redis://127.0.0.1:6390 KEYS SECONDS TASKS POLICY
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Request;
use hdrhistogram::Histogram;
use tollgate_throttle::{
    Extract, FixedWindow, Gcra, Limit, OnError, RedisStore, RequestHead, Rule, Throttler,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let keys: u64 = args.get(2).map_or(Ok(1), |s| s.parse())?;
    let seconds: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let tasks: u64 = args.get(4).map_or(Ok(64), |s| s.parse())?;
    let limit = match args.get(5).map_or("fw", String::as_str) {
        "fw" => Limit::FixedWindow(FixedWindow::new(1_000_000_000, Duration::from_secs(3600))?),
        "gcra" => Limit::Gcra(Gcra::new("1000000".parse()?, 1_000_000, 0)?),
        other => return Err(format!("POLICY \"{other}\" is neither fw nor gcra").into()),
    };

    let client = redis::Client::open(url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut admin).await?;
    let base: u64 = used_memory(&mut admin).await?;

    let store = RedisStore::builder(url.as_str())
        // Measured, not failed over: a generous deadline.
        .deadline(Duration::from_secs(1))
        .on_error(OnError::Deny)
        .connect()
        .await?;
    let throttler = Throttler::builder()
        .rule(Rule::new("bench", Extract::header("x-api-key"), limit))
        .store(store)
        .try_build()?;

    let stop = Arc::new(AtomicBool::new(false));
    let next_key = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let all = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (throttler, stop, next_key, failed, all) = (
            throttler.clone(),
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
                if !ok {
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
    Ok(())
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
