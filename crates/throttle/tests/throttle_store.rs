//! Bounded memory under key churn: a million distinct keys through a keyed
//! limiter capped at 65,536 keys, and long keys through a throttler's
//! rule, with the heap measured by a counting allocator. (The tests take
//! turns, so nothing else of theirs allocates concurrently.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use std::sync::Mutex;

use axum::http::Request;
use tollgate::{ManualClock, RateSpec};
use tollgate_throttle::{Extract, KeyedLimiter, Limit, RequestHead, Rule, Throttler, TokenPool};

/// Held by each test while it measures.
static TURN: Mutex<()> = Mutex::new(());

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: the counters order nothing; the test reads them after
        // its own allocations on the same thread.
        let live =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded from our caller, who upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded from our caller, who upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn a_million_keys_stay_under_the_cap() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const MAX_KEYS: usize = 65_536;
    // The budget: 192 bytes per key (171 bytes of slots, allocated when
    // the store is created: a 128-byte slot, as a `Box<str>` key and a
    // token pool's state exceed one cache line, per 3/4 key; plus the
    // key's text on the heap), 12 MiB in all.
    const BUDGET: isize = (MAX_KEYS * 192) as isize;
    let before = LIVE.load(Ordering::Relaxed);
    let policy = TokenPool::new("100,1.5".parse::<RateSpec>().unwrap());
    let store: KeyedLimiter<TokenPool> = KeyedLimiter::new(policy, MAX_KEYS);
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let mut key = String::new();
    for i in 0..1_000_000u64 {
        use std::fmt::Write;
        key.clear();
        write!(key, "client-{i}").unwrap();
        // One microsecond apart: no key goes idle (idle takes over a second).
        assert!(store.check(key.as_str(), i * 1000, 1).is_admitted());
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert!(store.len() <= MAX_KEYS, "{} keys", store.len());
    assert!(store.len() >= MAX_KEYS * 7 / 8, "{} keys", store.len());
    let ev = store.evictions();
    assert_eq!(ev.idle, 0);
    assert_eq!(ev.full as usize + store.len(), 1_000_000);
    println!(
        "{} keys held in {} bytes ({} per key; slots {} bytes), peak {} bytes",
        store.len(),
        held,
        held / store.len() as isize,
        store.table_bytes(),
        peak
    );
    assert!(held < BUDGET, "held {held} bytes, budget {BUDGET}");
    assert!(peak < BUDGET, "peak {peak} bytes, budget {BUDGET}");
    drop(store);
}

#[test]
fn long_keys_cost_no_more_than_short_ones() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const MAX_KEYS: usize = 4096;
    // The slots are allocated with the throttler; each key adds at most
    // 65 bytes of text (a key of 16 KiB is kept as its digest).
    const BUDGET: isize = (MAX_KEYS * 80) as isize;
    let before = LIVE.load(Ordering::Relaxed);
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new(
                "key",
                Extract::header("x-api-key"),
                Limit::TokenPool(TokenPool::new("100,1.5".parse().unwrap())),
            )
            .max_keys(MAX_KEYS),
        )
        .build();
    let mut held_by_throttler = 0;
    for i in 0..MAX_KEYS {
        let key = format!("{i:016384}");
        let r = Request::builder()
            .header("x-api-key", key)
            .body(())
            .unwrap();
        assert!(t.check(&RequestHead::of(&r)).is_ok());
        if i == 0 {
            // The throttler's own structures, before the keys add up.
            held_by_throttler = LIVE.load(Ordering::Relaxed) - before;
        }
    }
    let held = LIVE.load(Ordering::Relaxed) - before - held_by_throttler;
    println!(
        "{MAX_KEYS} keys of 16 KiB held in {held} bytes ({} per key)",
        held / MAX_KEYS as isize
    );
    assert!(held < BUDGET, "held {held} bytes, budget {BUDGET}");
    // Distinct long keys stay distinct.
    let r = Request::builder()
        .header("x-api-key", format!("{:016384}", 7))
        .body(())
        .unwrap();
    assert!(t.check(&RequestHead::of(&r)).is_ok());
    drop(t);
}
