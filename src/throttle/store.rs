//! [`KeyedLimiter`]: one policy applied per key, with key state created on
//! demand, capped in number and evicted when idle.
//!
//! # Implementation notes
//!
//! Keys hash (foldhash) to one of a power-of-two number of shards, each a
//! `Mutex<HashMap>` padded to its own cache line so that two threads
//! deciding for keys in different shards never share a line. A decision is
//! one hash, one uncontended lock and one map probe; the policy's arithmetic
//! runs under the shard lock on the key's plain state (no atomics inside).
//!
//! Memory is bounded by `max_keys`, split evenly over the shards. A key
//! seen for the first time is inserted only after its shard has room:
//!
//! 1. Idle sweep: once per idle period, and whenever the shard is full,
//!    entries untouched for the policy's [`Policy::idle_ns`] (and not
//!    banned) are dropped. Their state equals a fresh one, so idle eviction
//!    never changes a decision.
//! 2. If the shard is still full, the least recently used eighth is
//!    dropped (a selection on last-use times, O(n) for n/8 evictions, so
//!    O(1) amortised per insert). Those keys lose their state and start
//!    fresh: under churn beyond `max_keys` the store fails open for the
//!    oldest keys rather than growing. Each such eviction is counted.
//!
//! Bans (see the throttler's rules) live in the same entry, so a banned key
//! costs nothing extra and is never idle while banned.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use super::locks::lock;
use super::policy::{Policy, Verdict};

/// The most shards a store uses.
const MAX_SHARDS: usize = 64;
/// Keys per shard below which fewer shards are used.
const MIN_KEYS_PER_SHARD: usize = 256;

/// A policy applied independently to each key.
///
/// Holds at most `max_keys` keys. With the token pool and short string
/// keys a key costs about 170 bytes of heap (the 56-byte entry, the key,
/// and the hash table's slack), measured in `tests/throttle_store.rs`.
///
/// # Examples
///
/// ```
/// use tollgate::throttle::{FixedWindow, KeyedLimiter};
/// use std::time::Duration;
///
/// let limiter: KeyedLimiter<FixedWindow> =
///     KeyedLimiter::new(FixedWindow::new(1, Duration::from_secs(1))?, 10_000);
/// assert!(limiter.check("alice", 0, 1).is_admitted());
/// assert!(limiter.check("bob", 0, 1).is_admitted());
/// assert!(!limiter.check("alice", 1, 1).is_admitted());
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), tollgate::throttle::LimitError>(())
/// ```
pub struct KeyedLimiter<P: Policy, K = Box<str>> {
    policy: P,
    shards: Shards<K, P::State>,
    hasher: foldhash::fast::RandomState,
    shard_cap: usize,
    idle_ns: u64,
}

/// The shards, each on its own cache line.
type Shards<K, S> = Box<[CachePadded<Mutex<Shard<K, S>>>]>;

struct Shard<K, S> {
    map: HashMap<K, Entry<S>, foldhash::fast::RandomState>,
    last_sweep_ns: u64,
    evicted_idle: u64,
    evicted_full: u64,
}

struct Entry<S> {
    state: S,
    last_ns: u64,
    /// Rejected without a check until this time (0: not banned).
    banned_until_ns: u64,
}

/// Counts of keys dropped by a [`KeyedLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evictions {
    /// Keys dropped after being idle (lossless).
    pub idle: u64,
    /// Keys dropped because the store was full (their state was lost).
    pub full: u64,
}

/// The outcome of a check with a ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BanCheck {
    pub(crate) verdict: Verdict,
    /// The key was already banned: the policy was not consulted.
    pub(crate) banned: bool,
    /// This rejection started a ban.
    pub(crate) ban_started: bool,
}

impl<P: Policy, K: Hash + Eq> KeyedLimiter<P, K> {
    /// Applies `policy` per key, keeping at most `max_keys` keys (at least
    /// one per shard).
    pub fn new(policy: P, max_keys: usize) -> KeyedLimiter<P, K> {
        let shards = (max_keys / MIN_KEYS_PER_SHARD)
            .clamp(1, MAX_SHARDS)
            .next_power_of_two()
            .min(MAX_SHARDS);
        let shard_cap = max_keys.div_ceil(shards).max(1);
        let hasher = foldhash::fast::RandomState::default();
        let shards = (0..shards)
            .map(|_| {
                CachePadded::new(Mutex::new(Shard {
                    map: HashMap::with_hasher(hasher.clone()),
                    last_sweep_ns: 0,
                    evicted_idle: 0,
                    evicted_full: 0,
                }))
            })
            .collect();
        KeyedLimiter {
            idle_ns: policy.idle_ns(),
            policy,
            shards,
            hasher,
            shard_cap,
        }
    }

    /// The policy applied to every key.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// Decides a request of `cost` for `key` at `now_ns`.
    pub fn check<Q>(&self, key: &Q, now_ns: u64, cost: u64) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, e| {
            policy.check(&mut e.state, now_ns, cost)
        })
    }

    /// Post-accounting for `key`: see [`Policy::settle`].
    pub fn settle<Q>(&self, key: &Q, now_ns: u64, delta: i64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, e| {
            policy.settle(&mut e.state, now_ns, delta)
        })
    }

    /// Like [`check`](Self::check), but a rejection bans the key until the
    /// policy would admit it again plus `ban_ns`; while banned, every
    /// request is rejected without consulting the policy.
    pub(crate) fn check_with_ban<Q>(&self, key: &Q, now_ns: u64, cost: u64, ban_ns: u64) -> BanCheck
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, e| {
            if e.banned_until_ns > now_ns {
                return BanCheck {
                    verdict: Verdict::Reject {
                        retry_after_ns: e.banned_until_ns - now_ns,
                    },
                    banned: true,
                    ban_started: false,
                };
            }
            let verdict = policy.check(&mut e.state, now_ns, cost);
            match verdict {
                Verdict::Reject { retry_after_ns } if retry_after_ns != u64::MAX => {
                    let until = now_ns.saturating_add(retry_after_ns).saturating_add(ban_ns);
                    e.banned_until_ns = until;
                    BanCheck {
                        verdict: Verdict::Reject {
                            retry_after_ns: until - now_ns,
                        },
                        banned: false,
                        ban_started: true,
                    }
                }
                _ => BanCheck {
                    verdict,
                    banned: false,
                    ban_started: false,
                },
            }
        })
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this store holds.
    pub fn max_keys(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    /// The number of banned keys at `now_ns`.
    pub fn banned(&self, now_ns: u64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                lock(s)
                    .map
                    .values()
                    .filter(|e| e.banned_until_ns > now_ns)
                    .count()
            })
            .sum()
    }

    /// Keys dropped so far.
    pub fn evictions(&self) -> Evictions {
        self.shards.iter().fold(Evictions::default(), |acc, s| {
            let s = lock(s);
            Evictions {
                idle: acc.idle + s.evicted_idle,
                full: acc.full + s.evicted_full,
            }
        })
    }

    /// Drops every idle key now (inserts also do this lazily).
    pub fn sweep(&self, now_ns: u64) {
        for shard in self.shards.iter() {
            lock(shard).sweep_idle(now_ns, self.idle_ns);
        }
    }

    fn with_entry<Q, R>(
        &self,
        key: &Q,
        now_ns: u64,
        f: impl FnOnce(&P, &mut Entry<P::State>) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let hash = self.hasher.hash_one(key);
        // The high bits pick the shard; the map uses the whole hash.
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        let mut shard = lock(&self.shards[index]);
        if let Some(e) = shard.map.get_mut(key) {
            e.last_ns = e.last_ns.max(now_ns);
            return f(&self.policy, e);
        }
        shard.make_room(now_ns, self.idle_ns, self.shard_cap);
        let e = shard.map.entry(key.to_owned().into()).or_insert(Entry {
            state: self.policy.new_state(now_ns),
            last_ns: now_ns,
            banned_until_ns: 0,
        });
        f(&self.policy, e)
    }
}

impl<K: Hash + Eq, S> Shard<K, S> {
    fn sweep_idle(&mut self, now_ns: u64, idle_ns: u64) {
        let before = self.map.len();
        self.map.retain(|_, e| {
            now_ns.saturating_sub(e.last_ns) < idle_ns || e.banned_until_ns > now_ns
        });
        self.evicted_idle += (before - self.map.len()) as u64;
        self.last_sweep_ns = now_ns;
    }

    fn make_room(&mut self, now_ns: u64, idle_ns: u64, cap: usize) {
        let due = now_ns.saturating_sub(self.last_sweep_ns) >= idle_ns;
        if due || self.map.len() >= cap {
            self.sweep_idle(now_ns, idle_ns);
        }
        if self.map.len() < cap {
            return;
        }
        // Drop the least recently used eighth (at least one key).
        let mut times: Vec<u64> = self.map.values().map(|e| e.last_ns).collect();
        let n = (times.len() / 8).max(1);
        let (_, &mut threshold, _) = times.select_nth_unstable(n - 1);
        let before = self.map.len();
        let mut budget = n;
        self.map.retain(|_, e| {
            if budget > 0 && e.last_ns <= threshold {
                budget -= 1;
                false
            } else {
                true
            }
        });
        self.evicted_full += (before - self.map.len()) as u64;
        // Removals leave tombstones that would make the table grow on
        // later inserts; rebuilding it at the cap keeps its size bounded.
        self.map.shrink_to(cap);
    }
}

impl<P: Policy, K> fmt::Debug for KeyedLimiter<P, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("policy", &self.policy)
            .field("shards", &self.shards.len())
            .field("max_keys", &(self.shard_cap * self.shards.len()))
            .field("idle_ns", &self.idle_ns)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::FixedWindow;
    use std::time::Duration;

    fn window(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(100)).unwrap()
    }

    #[test]
    fn idle_keys_are_swept_without_changing_decisions() {
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), 1000);
        assert!(store.check(&1, 0, 1).is_admitted());
        assert!(!store.check(&1, 99, 1).is_admitted());
        store.sweep(99);
        assert_eq!(store.len(), 1);
        store.sweep(199);
        assert_eq!(store.len(), 0);
        assert_eq!(store.evictions(), Evictions { idle: 1, full: 0 });
    }

    #[test]
    fn a_full_store_drops_its_least_recently_used_keys() {
        // One shard of 16 keys, none idle: the 2 oldest go.
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), 16);
        for k in 0..16 {
            store.check(&k, k, 1);
        }
        assert_eq!(store.len(), 16);
        store.check(&100, 20, 1);
        assert_eq!(store.len(), 15);
        assert_eq!(store.evictions(), Evictions { idle: 0, full: 2 });
        // Keys 0 and 1 start fresh; key 2 kept its state.
        assert!(store.check(&0, 21, 1).is_admitted());
        assert!(!store.check(&2, 21, 1).is_admitted());
    }

    #[test]
    fn a_ban_outlasts_the_limit_by_its_duration() {
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), 16);
        assert!(!store.check_with_ban(&7, 0, 1, 1000).banned);
        let c = store.check_with_ban(&7, 10, 1, 1000);
        // The window ends at 100; the ban lasts 1000 more.
        assert_eq!(
            c.verdict,
            Verdict::Reject {
                retry_after_ns: 1090
            }
        );
        assert!(c.ban_started);
        assert_eq!(store.banned(10), 1);
        let c = store.check_with_ban(&7, 500, 1, 1000);
        assert!(c.banned);
        assert_eq!(
            c.verdict,
            Verdict::Reject {
                retry_after_ns: 600
            }
        );
        // Banned keys are never idle.
        store.sweep(1099);
        assert_eq!(store.len(), 1);
        assert!(store
            .check_with_ban(&7, 1100, 1, 1000)
            .verdict
            .is_admitted());
    }
}
