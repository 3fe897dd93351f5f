//! Keyed decision throughput: tollgate's `KeyedLimiter<TokenPool>` against
//! governor's keyed limiter (DashMap, GCRA), in one run, on two threads.
//!
//! A third limiter, [`baseline::MapStore`], is a frozen copy of the store's
//! decision path (a `Mutex<HashMap>` per shard, probed with
//! `HashMap::get_mut`, so a key is hashed once for its shard and again for
//! the map), kept here so that a change to the store is measured against
//! it in the same run; the `/map` column is that ratio.
//!
//! Two workloads: every decision on one hot key, and decisions spread over
//! one million distinct keys (every store pre-filled, so the loop measures
//! steady-state lookups rather than inserts). All limiters are set far
//! above what the loop can issue, so every decision is an admission and
//! each measures the limiter's own cost. In the first two workloads each
//! decision reads the time-stamp counter (tollgate: its quanta
//! `SystemClock`; governor: its default quanta clock). On some machines
//! (a KVM guest, for one) a counter read waits for the loads before it,
//! so that one decision's cache miss no longer overlaps the next one's.
//! The next two repeat them with the kernel's coarse clock for both
//! (tollgate's `CoarseClock`, `CLOCK_MONOTONIC_COARSE`; governor through
//! its `Clock` trait), which a throttler may be given instead; the last
//! two with quanta's recent clock for both (one atomic load of a time an
//! upkeep thread refreshes every millisecond; governor's
//! `QuantaUpkeepClock`).
//!
//! Three more figures bound the spread workloads: random reads from a
//! 64 MiB array (the size of a million entries), the machine's memory
//! floor, and the same reads with a counter read before each, or a coarse
//! clock read, the floors when every decision reads that clock.
//!
//! The machine is shared and noisy: read the tollgate/governor ratio within
//! one workload, not the absolute numbers. Each figure is the best of five
//! rounds. Two rates are printed for each: by wall time (what two
//! uncontended cores would give only on an idle machine) and by the two
//! threads' own CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the
//! time other processes held the cores, so that a loaded machine's time
//! slicing does not swamp the per-decision cost. It also leaves out time a
//! thread slept waiting for a lock, so it would flatter a limiter whose
//! locks park threads (DashMap's can, under a writer): on a quiet machine,
//! read the wall rates.
//!
//! Tollgate's store is created with room for 1.25 million keys: it
//! allocates its slots for `max_keys` up front, so the cap sets its
//! footprint (the map store and governor grow with the keys they hold).
//!
//! The second part measures the tower layer's overhead in an axum
//! hello-world under load: requests per second, and the process's CPU time
//! per request (server and load generator together), through the same
//! server without a layer, with [`ThrottleLayer`] (rules per API key and
//! per peer IP, or per API key alone, on token pools set far above the
//! load, so every request is admitted), and with tower_governor's
//! `GovernorLayer` keyed by the same API key (GCRA, likewise never
//! refusing), from 16 keep-alive HTTP/1.1 connections on the same
//! machine, two rounds each, alternating, best kept. The last line is the
//! per-key pair's ratio: tollgate's layer against tower_governor's.
//!
//! `cargo bench -p tollgate-throttle --bench throttle` (about two minutes).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use axum::{routing::get, Router};
use governor::clock::QuantaUpkeepClock;
use governor::nanos::Nanos;
use governor::{Quota, RateLimiter as Governor};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tollgate::{Clock, CoarseClock, RateSpec, SystemClock};
use tollgate_throttle::{Extract, KeyedLimiter, Limit, Rule, ThrottleLayer, Throttler, TokenPool};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

const THREADS: usize = 2;
const ITERS: u64 = 4_000_000;
const KEYS: u64 = 1_000_000;
const ROUNDS: usize = 5;

mod baseline {
    //! The keyed store's layout: shards of `Mutex<HashMap<K, Entry>>`
    //! padded to a cache line each, the shard picked by bits 40.. of the
    //! key's foldhash, the map probed with `get_mut` (hashing the key a
    //! second time). Only the decision path is kept: the benchmark stays
    //! below the cap, so neither store evicts.

    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash};
    use std::sync::Mutex;

    use crossbeam_utils::CachePadded;
    use tollgate_throttle::{Policy, Verdict};

    struct Entry<S> {
        state: S,
        last_ns: u64,
        /// Never read here; kept so that the entry has the store's size.
        #[allow(dead_code)]
        banned_until_ns: u64,
    }

    type Shard<K, S> = CachePadded<Mutex<HashMap<K, Entry<S>, foldhash::fast::RandomState>>>;

    /// The store's decision path, 64 shards.
    pub(crate) struct MapStore<P: Policy, K> {
        policy: P,
        shards: Box<[Shard<K, P::State>]>,
        hasher: foldhash::fast::RandomState,
    }

    impl<P: Policy, K: Hash + Eq + Copy> MapStore<P, K> {
        pub(crate) fn new(policy: P) -> MapStore<P, K> {
            let hasher = foldhash::fast::RandomState::default();
            let shards = (0..64)
                .map(|_| CachePadded::new(Mutex::new(HashMap::with_hasher(hasher.clone()))))
                .collect();
            MapStore {
                policy,
                shards,
                hasher,
            }
        }

        pub(crate) fn check(&self, key: &K, now_ns: u64, cost: u64) -> Verdict {
            let hash = self.hasher.hash_one(key);
            let index = (hash >> 40) as usize & (self.shards.len() - 1);
            let mut map = self.shards[index].lock().unwrap();
            if let Some(e) = map.get_mut(key) {
                e.last_ns = e.last_ns.max(now_ns);
                return self.policy.check(&mut e.state, now_ns, cost);
            }
            let e = map.entry(*key).or_insert(Entry {
                state: self.policy.new_state(now_ns),
                last_ns: now_ns,
                banned_until_ns: 0,
            });
            self.policy.check(&mut e.state, now_ns, cost)
        }
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `op(thread, i)` `ITERS` times on each thread, released together;
/// returns the wall time from the first start to the last end and the
/// threads' CPU time, summed.
fn run<F: Fn(usize, u64) + Sync>(op: F) -> (Duration, Duration) {
    let start = Barrier::new(THREADS);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (start, op) = (&start, &op);
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let cpu = thread_cpu();
                    for i in 0..ITERS {
                        op(t, i);
                    }
                    (began, Instant::now(), thread_cpu() - cpu)
                })
            })
            .collect();
        let spans: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let first = spans.iter().map(|s| s.0).min().unwrap();
        let last = spans.iter().map(|s| s.1).max().unwrap();
        (last - first, spans.iter().map(|s| s.2).sum())
    })
}

/// Decisions per second in one round: by wall time, and by CPU time (as
/// if each thread had had its core to itself).
fn rate<F: Fn(usize, u64) + Sync>(op: F) -> Rate {
    let (wall, cpu) = run(&op);
    let decisions = (THREADS as u64 * ITERS) as f64;
    Rate {
        wall: decisions / wall.as_secs_f64(),
        cpu: decisions * THREADS as f64 / cpu.as_secs_f64(),
    }
}

/// Decisions per second by wall and by CPU time, each the best so far.
#[derive(Clone, Copy, Default)]
struct Rate {
    wall: f64,
    cpu: f64,
}

impl Rate {
    fn max(self, other: Rate) -> Rate {
        Rate {
            wall: self.wall.max(other.wall),
            cpu: self.cpu.max(other.cpu),
        }
    }
}

/// Decisions per second, best of `ROUNDS`.
fn best<F: Fn(usize, u64) + Sync>(op: F) -> Rate {
    (0..ROUNDS)
        .map(|_| rate(&op))
        .fold(Rate::default(), Rate::max)
}

/// A key in `0..KEYS` for decision `i` of thread `t`: a multiplicative
/// hash, so consecutive decisions hit unrelated keys.
fn spread(t: usize, i: u64) -> u64 {
    (i.wrapping_add(t as u64 * 7_919)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 11)
        % KEYS
}

/// Time from quanta's recent clock: the global time the upkeep thread
/// (started by governor's [`QuantaUpkeepClock`]) refreshes every
/// `RECENT_INTERVAL`, read with one atomic load and no time-stamp counter.
#[derive(Debug)]
struct RecentClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl RecentClock {
    fn now_ns(&self) -> u64 {
        let elapsed = self.clock.recent().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The kernel's coarse clock as governor's clock: the same reads as
/// tollgate's [`CoarseClock`].
#[derive(Debug, Clone)]
struct GovernorCoarse(CoarseClock);

impl governor::clock::Clock for GovernorCoarse {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(self.0.now_ns())
    }
}

/// How often the upkeep thread refreshes the recent clock.
const RECENT_INTERVAL: Duration = Duration::from_millis(1);

/// One workload's best rates: tollgate, the map store and governor.
type Row = (&'static str, Rate, Rate, Rate);

/// Runs one workload: decisions over `keys` keys (one hot key when 1),
/// tollgate and the map store reading `now`, governor deciding with
/// `governor` (which reads its own clock), interleaved round by round.
fn workload<N, G>(name: &'static str, keys: u64, spec: RateSpec, now: N, governor: G) -> Row
where
    N: Fn() -> u64 + Sync,
    G: Fn(&u64) -> bool + Sync,
{
    let ours: KeyedLimiter<TokenPool, u64> =
        KeyedLimiter::new(TokenPool::new(spec), (KEYS + KEYS / 4) as usize);
    let base: baseline::MapStore<TokenPool, u64> = baseline::MapStore::new(TokenPool::new(spec));
    for k in 0..keys {
        ours.check(&k, now(), 1);
        base.check(&k, now(), 1);
        governor(&k);
    }
    let key = |t, i| if keys == 1 { 0 } else { spread(t, i) };
    let (mut t, mut b, mut g) = (Rate::default(), Rate::default(), Rate::default());
    // Interleaved rounds, so that a slow spell of the shared machine
    // falls on all three limiters alike.
    for _ in 0..ROUNDS {
        t = t.max(rate(|th, i| {
            black_box(ours.check(&key(th, i), now(), 1));
        }));
        b = b.max(rate(|th, i| {
            black_box(base.check(&key(th, i), now(), 1));
        }));
        g = g.max(rate(|th, i| {
            black_box(governor(&key(th, i)));
        }));
    }
    assert_eq!(ours.evictions().full, 0, "the store held every key");
    (name, t, b, g)
}

fn main() {
    let spec: RateSpec = "1T".parse().expect("a valid spec");
    let clock = SystemClock::new();
    let quota = Quota::per_second(NonZeroU32::MAX);

    let mut rows = Vec::new();
    // Every decision reads the time-stamp counter.
    for (name, keys) in [("one hot key", 1u64), ("1M distinct keys", KEYS)] {
        let gov = Governor::dashmap(quota);
        rows.push(workload(
            name,
            keys,
            spec,
            || clock.now_ns(),
            |k| gov.check_key(k).is_ok(),
        ));
    }
    // Every decision reads the kernel's coarse clock, tollgate and
    // governor alike.
    let coarse = CoarseClock::new();
    for (name, keys) in [("one hot key, coarse", 1u64), ("1M keys, coarse", KEYS)] {
        let gov = Governor::dashmap_with_clock(quota, GovernorCoarse(coarse.clone()));
        rows.push(workload(
            name,
            keys,
            spec,
            || coarse.now_ns(),
            |k| gov.check_key(k).is_ok(),
        ));
    }
    // Every decision reads the recent clock, tollgate's and governor's
    // alike (governor's `QuantaUpkeepClock` starts the upkeep thread).
    let upkeep = QuantaUpkeepClock::from_interval(RECENT_INTERVAL).expect("an upkeep thread");
    let quanta = quanta::Clock::new();
    let recent = RecentClock {
        origin: quanta.recent(),
        clock: quanta,
    };
    for (name, keys) in [("one hot key, recent", 1u64), ("1M keys, recent", KEYS)] {
        let gov = Governor::dashmap_with_clock(quota, upkeep.clone());
        rows.push(workload(
            name,
            keys,
            spec,
            || recent.now_ns(),
            |k| gov.check_key(k).is_ok(),
        ));
    }
    drop(upkeep);
    // The machine's floor for a store larger than its caches: one
    // dependent-free random read per decision from a 64 MiB array, the
    // size of a million keyed entries; and the same with a counter read
    // per decision, as the first two workloads make, or a coarse clock
    // read.
    let array: Vec<u64> = (0..8 * KEYS).collect();
    let floor = best(|th, i| {
        black_box(array[(spread(th, i) * 8 + (i & 7)) as usize]);
    });
    let floor_clock = best(|th, i| {
        black_box(clock.now_ns());
        black_box(array[(spread(th, i) * 8 + (i & 7)) as usize]);
    });
    let floor_coarse = best(|th, i| {
        black_box(coarse.now_ns());
        black_box(array[(spread(th, i) * 8 + (i & 7)) as usize]);
    });

    println!(
        "keyed decisions/s on {THREADS} threads (best of {ROUNDS} rounds of {ITERS} per thread)"
    );
    for (clock, pick) in [
        ("wall", (|r: Rate| r.wall) as fn(Rate) -> f64),
        ("cpu", |r: Rate| r.cpu),
    ] {
        println!(
            "{:<30} {:>12} {:>12} {:>12} {:>9} {:>9}",
            "workload", "tollgate", "map store", "governor", "/map", "/governor"
        );
        for &(name, t, b, g) in &rows {
            let (t, b, g) = (pick(t), pick(b), pick(g));
            println!(
                "{:<30} {t:>12.0} {b:>12.0} {g:>12.0} {:>9.2} {:>9.2}",
                format!("{name} ({clock})"),
                t / b,
                t / g
            );
        }
    }
    println!(
        "random reads of a 64 MiB array: {:.0}/s wall, {:.0}/s cpu (the memory floor for 1M keys)",
        floor.wall, floor.cpu
    );
    println!(
        "the same with a counter read each: {:.0}/s wall, {:.0}/s cpu",
        floor_clock.wall, floor_clock.cpu
    );
    println!(
        "the same with a coarse clock read each: {:.0}/s wall, {:.0}/s cpu (step {} ns)",
        floor_coarse.wall,
        floor_coarse.cpu,
        coarse.resolution_ns()
    );

    layer_overhead(spec);
}

const CONNECTIONS: usize = 16;
const LOAD: Duration = Duration::from_secs(3);

/// Requests per second through an axum hello-world, with and without the
/// layer.
fn layer_overhead(spec: RateSpec) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let per_key = || {
        Rule::new(
            "per-key",
            Extract::header("x-api-key"),
            Limit::TokenPool(TokenPool::new(spec)),
        )
    };
    let two_rules = Throttler::builder()
        .rule(per_key())
        .rule(Rule::new(
            "per-ip",
            Extract::peer_ip(),
            Limit::TokenPool(TokenPool::new(spec)),
        ))
        .build();
    let one_rule = Throttler::builder().rule(per_key()).build();
    // tower_governor's layer with the same rule: one GCRA limiter per API
    // key, set as far above the load as the token pools.
    let governed = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .key_extractor(ApiKey)
        .finish()
        .expect("a governor configuration");
    let plain = Router::new().route("/", get(|| async { "hello" }));
    let apps = [
        ("without a layer", plain.clone()),
        (
            "tollgate, 2 rules",
            plain.clone().layer(ThrottleLayer::new(two_rules)),
        ),
        (
            "tollgate, per key",
            plain.clone().layer(ThrottleLayer::new(one_rule)),
        ),
        (
            "tower_governor, per key",
            plain.clone().layer(GovernorLayer::new(governed)),
        ),
    ];
    // Rounds alternate the four, best kept; CPU is the process's (server
    // and load alike), per response.
    let mut best = [(0.0f64, f64::INFINITY); 4];
    for _ in 0..2 {
        for (i, (_, app)) in apps.iter().enumerate() {
            let (rate, cpu) = rt.block_on(load(app.clone()));
            best[i] = (best[i].0.max(rate), best[i].1.min(cpu));
        }
    }
    println!("axum hello-world, {CONNECTIONS} keep-alive connections, best of 2 x {LOAD:?}");
    for ((name, _), (rate, cpu)) in apps.iter().zip(best) {
        println!(
            "{name:<24} {rate:>10.0} req/s  x{:.3}   cpu {:>6.2} us/req  x{:.3}",
            rate / best[0].0,
            cpu * 1e6,
            cpu / best[0].1
        );
    }
    println!(
        "per key, tollgate / tower_governor: req/s x{:.3}, cpu per request x{:.3}",
        best[2].0 / best[3].0,
        best[2].1 / best[3].1
    );
}

/// tower_governor's key: the `x-api-key` header (an error without one).
#[derive(Debug, Clone, Copy)]
struct ApiKey;

impl KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, req: &axum::http::Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// The process's CPU time (user and system), in seconds.
fn process_cpu() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Serves `app` on 127.0.0.1:0 and returns the responses per second and
/// the process's CPU seconds per response.
async fn load(app: Router) -> (f64, f64) {
    let cpu = process_cpu();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let server = tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await;
    });
    let deadline = tokio::time::Instant::now() + LOAD;
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let request =
                    format!("GET / HTTP/1.1\r\nhost: bench\r\nx-api-key: key-{c}\r\n\r\n");
                let (mut done, mut line, mut body) = (0u64, String::new(), Vec::new());
                while tokio::time::Instant::now() < deadline {
                    write.write_all(request.as_bytes()).await.expect("write");
                    let mut length = 0;
                    loop {
                        line.clear();
                        read.read_line(&mut line).await.expect("read");
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().expect("a length");
                        }
                    }
                    body.resize(length, 0);
                    read.read_exact(&mut body).await.expect("a body");
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        total += c.await.expect("a client");
    }
    server.abort();
    let cpu = process_cpu() - cpu;
    (total as f64 / LOAD.as_secs_f64(), cpu / total.max(1) as f64)
}
