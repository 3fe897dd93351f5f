//! [`KeyedLimiter`]: one policy applied per key, with key state created on
//! demand, capped in number and evicted when idle.
//!
//! # Implementation notes
//!
//! Keys hash (foldhash) to one of a power-of-two number of shards; each
//! shard owns a run of cache-line slots in one open-addressed table (see
//! the `tollgate-table` crate, `crates/table`) and a `Mutex` for the rare paths. A decision for a key
//! already held is one hash, a probe (usually one slot, one cache miss) and
//! the slot's own lock bit, set by compare-and-swap on that same line; the
//! policy's arithmetic runs on the state inline in the slot. No shard-wide
//! lock is taken on that path, so two threads contend only when they decide
//! for the same key.
//!
//! With more keys than the caches hold, a hit costs about that one miss
//! (with three fifths of a run occupied, seven keys in ten sit in their
//! home slot; the rest cost a further line or more). Independent decisions
//! overlap their misses, unless something between them waits for earlier
//! loads: on some machines (a KVM guest, for one) reading the
//! time-stamp counter does, so a caller that reads the clock before every
//! decision pays each miss in full. Reading the time once per request for
//! all its keys, or from a coarse clock, keeps the overlap
//! (`benches/throttle.rs` measures both).
//!
//! A key seen for the first time takes its shard's mutex, probes again (so
//! two threads never insert one key twice) and is inserted only after the
//! shard has room. Memory is bounded by `max_keys`, split evenly over the
//! shards:
//!
//! 1. Idle sweep: once per idle period, and whenever the shard is full,
//!    entries untouched for the policy's [`Policy::idle_ns`] (and neither
//!    banned nor owing post-accounted cost, [`Policy::owes`]) are dropped.
//!    Their state equals a fresh one, so idle eviction never changes a
//!    decision.
//! 2. If the shard is still full, the least recently used eighth is
//!    dropped (a selection on last-use times, O(n) for n/8 evictions, so
//!    O(1) amortised per insert). Those keys lose their state and start
//!    fresh: under churn beyond `max_keys` the store fails open for the
//!    oldest keys rather than growing. Each such eviction is counted.
//!
//! A removal locks the slot's bit first, so a concurrent decision on the
//! key either completes before it or misses and inserts the key afresh.
//!
//! Bans (see the throttler's rules) live in the same slot: a tag bit marks
//! the key banned and the slot's time word then holds the ban's end rather
//! than the last use (a banned key is never idle, and after its ban it is
//! idle from the ban's end, never earlier than from its last check).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use super::policy::{Policy, Standing, Verdict};
use tollgate_service::LockUnpoisoned;
use tollgate_table::{Guard, Occupancy, Table};

/// The most shards a store uses.
const MAX_SHARDS: usize = 64;
/// Keys per shard below which fewer shards are used.
const MIN_KEYS_PER_SHARD: usize = 256;
/// A policy applied independently to each key.
///
/// Holds at most `max_keys` keys (capped at [`MAX_KEYS`](Self::MAX_KEYS)).
/// Its slots are allocated when it is created, 4/3 of a slot per key of
/// `max_keys` (at most three quarters are ever occupied), each 64 bytes
/// when the key and the policy's state fit in 48 bytes (a `u64` key with
/// [`TokenPool`](super::TokenPool)) and 128 bytes up to 112 (a `Box<str>`
/// key, whose text also lives on the heap). A `u64` key with a token pool
/// thus costs 86 bytes of capacity, and a `Box<str>` key 171 plus its
/// text (about 195 bytes per key held for short keys, measured in
/// `tests/throttle_store.rs`). The allocation is zeroed lazily, so pages
/// no key has touched take no resident memory. Keys are kept as given, so
/// bound their length where clients choose them (a
/// [`Throttler`](super::Throttler)'s rules keep a key over 64 bytes as
/// its SHA-256).
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{FixedWindow, KeyedLimiter};
/// use std::time::Duration;
///
/// let limiter: KeyedLimiter<FixedWindow> =
///     KeyedLimiter::new(FixedWindow::new(1, Duration::from_secs(1))?, 10_000);
/// assert!(limiter.check("alice", 0, 1).is_admitted());
/// assert!(limiter.check("bob", 0, 1).is_admitted());
/// assert!(!limiter.check("alice", 1, 1).is_admitted());
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
pub struct KeyedLimiter<P: Policy, K = Box<str>> {
    policy: P,
    table: Table<K, P::State>,
    /// The rare paths' lock per shard, each on its own cache line so that
    /// inserts in different shards do not share one.
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    hasher: foldhash::fast::RandomState,
    shard_cap: usize,
    idle_ns: u64,
}

/// What a shard's mutex guards besides its run's layout.
#[derive(Debug, Default)]
struct Shard {
    occupancy: Occupancy,
    last_sweep_ns: u64,
    evicted_idle: u64,
    evicted_full: u64,
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
    /// Where the key stands after the check, when asked for.
    pub(crate) standing: Option<Standing>,
}

impl<P: Policy, K: Hash + Eq> KeyedLimiter<P, K> {
    /// The most keys a store holds, whatever `max_keys` asks: its slots are
    /// allocated when it is created (zeroed, so untouched pages cost no
    /// resident memory), and this keeps that allocation within reach of a
    /// 64-bit machine.
    pub const MAX_KEYS: usize = 1 << 26;

    /// Applies `policy` per key, keeping at most `max_keys` keys (at least
    /// one per shard, at most [`MAX_KEYS`](Self::MAX_KEYS)).
    pub fn new(policy: P, max_keys: usize) -> KeyedLimiter<P, K> {
        let max_keys = max_keys.min(Self::MAX_KEYS);
        let shards = (max_keys / MIN_KEYS_PER_SHARD)
            .clamp(1, MAX_SHARDS)
            .next_power_of_two()
            .min(MAX_SHARDS);
        let shard_cap = max_keys.div_ceil(shards).max(1);
        // At most three quarters of a run occupied, and one slot free.
        let run = (shard_cap * 4).div_ceil(3).max(shard_cap + 1);
        KeyedLimiter {
            idle_ns: policy.idle_ns(),
            policy,
            table: Table::new(shards, run),
            shards: (0..shards).map(|_| CachePadded::default()).collect(),
            hasher: foldhash::fast::RandomState::default(),
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
        self.with_entry(key, now_ns, |policy, state, _| {
            policy.check(state, now_ns, cost)
        })
    }

    /// Post-accounting for `key`: see [`Policy::settle`].
    pub fn settle<Q>(&self, key: &Q, now_ns: u64, delta: i64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, state, _| {
            policy.settle(state, now_ns, delta)
        })
    }

    /// Runs `f` on `key`'s state at `now_ns` (a fresh state if the key is
    /// new), under the key's lock, and records the use: for callers that
    /// decide with a policy of the same kind but other parameters (a rate
    /// limit service whose rules share one window's counters), or that take
    /// several steps on one state at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_throttle::{FixedWindow, KeyedLimiter, Policy, Verdict};
    ///
    /// let minute = Duration::from_secs(60);
    /// let store: KeyedLimiter<FixedWindow> = KeyedLimiter::new(FixedWindow::new(1, minute)?, 1000);
    /// // Three a minute on this key, counted in the store's table.
    /// let three = FixedWindow::new(3, minute)?;
    /// let verdict = store.update("k", 0, |_, state| three.check(state, 0, 2));
    /// assert_eq!(verdict, Verdict::Admit { remaining: 1 });
    /// # Ok::<(), tollgate_throttle::ValueError>(())
    /// ```
    pub fn update<Q, R>(&self, key: &Q, now_ns: u64, f: impl FnOnce(&P, &mut P::State) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, state, _| f(policy, state))
    }

    /// Like [`check`](Self::check), but with `ban_ns`, a rejection bans
    /// the key until the policy would admit it again plus `ban_ns`; while
    /// banned, every request is rejected without consulting the policy.
    /// With `standing`, also where the key stands after the check.
    pub(crate) fn check_with<Q>(
        &self,
        key: &Q,
        now_ns: u64,
        cost: u64,
        ban_ns: Option<u64>,
        standing: bool,
    ) -> BanCheck
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, state, banned_until_ns| {
            let mut out = BanCheck {
                verdict: Verdict::Reject {
                    retry_after_ns: banned_until_ns.saturating_sub(now_ns),
                },
                banned: *banned_until_ns > now_ns,
                ban_started: false,
                standing: None,
            };
            if !out.banned {
                out.verdict = policy.check(state, now_ns, cost);
                match (out.verdict, ban_ns) {
                    (Verdict::Reject { retry_after_ns }, Some(ban_ns))
                        if retry_after_ns != u64::MAX =>
                    {
                        let until = now_ns.saturating_add(retry_after_ns).saturating_add(ban_ns);
                        *banned_until_ns = until;
                        out.verdict = Verdict::Reject {
                            retry_after_ns: until - now_ns,
                        };
                        out.ban_started = true;
                    }
                    _ => {}
                }
            }
            if standing {
                out.standing = Some(standing_of(policy, state, now_ns, *banned_until_ns));
            }
            out
        })
    }

    /// Post-accounting for `key`, as [`settle`](Self::settle), and with
    /// `standing`, where the key stands after it.
    pub(crate) fn settle_with<Q>(
        &self,
        key: &Q,
        now_ns: u64,
        delta: i64,
        standing: bool,
    ) -> Option<Standing>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.with_entry(key, now_ns, |policy, state, banned_until_ns| {
            policy.settle(state, now_ns, delta);
            standing.then(|| standing_of(policy, state, now_ns, *banned_until_ns))
        })
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock_unpoisoned().occupancy.len)
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this store holds.
    pub fn max_keys(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    /// The bytes of the store's slot table (allocated when the store is
    /// created; keys' and states' own heap memory comes on top).
    pub fn table_bytes(&self) -> usize {
        self.table.bytes()
    }

    /// The number of banned keys at `now_ns`.
    pub fn banned(&self, now_ns: u64) -> usize {
        let mut banned = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            let mut shard = shard.lock_unpoisoned();
            // SAFETY: this thread holds shard `index`'s lock, whose
            // occupancy this is.
            unsafe {
                self.table.for_each(&mut shard.occupancy, index, |_, g| {
                    if g.banned() && g.time() > now_ns {
                        banned += 1;
                    }
                });
            }
        }
        banned
    }

    /// Keys dropped so far.
    pub fn evictions(&self) -> Evictions {
        self.shards.iter().fold(Evictions::default(), |acc, s| {
            let s = s.lock_unpoisoned();
            Evictions {
                idle: acc.idle + s.evicted_idle,
                full: acc.full + s.evicted_full,
            }
        })
    }

    /// Drops every idle key now (inserts also do this lazily).
    pub fn sweep(&self, now_ns: u64) {
        for (index, shard) in self.shards.iter().enumerate() {
            self.sweep_idle(&mut shard.lock_unpoisoned(), index, now_ns);
        }
    }

    /// Runs `f` on `key`'s state (inserting a fresh one if the key is new)
    /// with the key's ban end (0: none), which `f` may set.
    fn with_entry<Q, R>(
        &self,
        key: &Q,
        now_ns: u64,
        f: impl FnOnce(&P, &mut P::State, &mut u64) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let hash = self.hasher.hash_one(key);
        // The high bits pick the shard; the table uses the rest.
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        if let Some(guard) = self.table.find(index, hash, key) {
            return self.decide(guard, now_ns, f);
        }
        let mut shard = self.shards[index].lock_unpoisoned();
        // Another thread may have inserted the key, or a rebuild hidden it.
        if let Some(guard) = self.table.find(index, hash, key) {
            return self.decide(guard, now_ns, f);
        }
        self.make_room(&mut shard, index, now_ns);
        // SAFETY: this thread holds shard `index`'s lock, whose occupancy
        // this is.
        let guard = unsafe {
            self.table.insert(
                &mut shard.occupancy,
                index,
                hash,
                key.to_owned().into(),
                self.policy.new_state(now_ns),
                now_ns,
            )
        };
        self.decide(guard, now_ns, f)
    }

    /// Runs `f` on a locked slot and records the use (or the ban).
    fn decide<R>(
        &self,
        mut guard: Guard<'_, K, P::State>,
        now_ns: u64,
        f: impl FnOnce(&P, &mut P::State, &mut u64) -> R,
    ) -> R {
        let time = guard.time();
        let mut banned_until_ns = if guard.banned() { time } else { 0 };
        let result = f(&self.policy, guard.state(), &mut banned_until_ns);
        if banned_until_ns > now_ns {
            guard.set_time(banned_until_ns, true);
        } else {
            guard.set_time(time.max(now_ns), false);
        }
        result
    }

    fn sweep_idle(&self, shard: &mut Shard, index: usize, now_ns: u64) {
        let idle_ns = self.idle_ns;
        let mut evicted = 0;
        // SAFETY (here and in `make_room`): the caller holds shard
        // `index`'s lock (`shard`), whose occupancy this is; a removal
        // takes the occupancy `for_each` hands it.
        unsafe {
            self.table
                .for_each(&mut shard.occupancy, index, |occupancy, mut g| {
                    // A banned slot's time is its ban's end: idle only from then.
                    let banned = g.banned() && g.time() > now_ns;
                    if !banned
                        && now_ns.saturating_sub(g.time()) >= idle_ns
                        && !self.policy.owes(g.state(), now_ns)
                    {
                        g.remove(occupancy);
                        evicted += 1;
                    }
                });
        }
        shard.evicted_idle += evicted;
        shard.last_sweep_ns = now_ns;
    }

    fn make_room(&self, shard: &mut Shard, index: usize, now_ns: u64) {
        let due = now_ns.saturating_sub(shard.last_sweep_ns) >= self.idle_ns;
        if due || shard.occupancy.len >= self.shard_cap {
            self.sweep_idle(shard, index, now_ns);
        }
        if shard.occupancy.len >= self.shard_cap {
            // Drop the least recently used eighth (at least one key).
            let mut times = Vec::with_capacity(shard.occupancy.len);
            // SAFETY: as in `sweep_idle`.
            unsafe {
                self.table
                    .for_each(&mut shard.occupancy, index, |_, g| times.push(g.time()));
            }
            let n = (times.len() / 8).max(1);
            let (_, &mut threshold, _) = times.select_nth_unstable(n - 1);
            let mut budget = n;
            // SAFETY: as in `sweep_idle`.
            unsafe {
                self.table
                    .for_each(&mut shard.occupancy, index, |occupancy, g| {
                        if budget > 0 && g.time() <= threshold {
                            budget -= 1;
                            g.remove(occupancy);
                        }
                    });
            }
            shard.evicted_full += (n - budget) as u64;
        }
        if self.table.needs_rebuild(&shard.occupancy) {
            // SAFETY: as in `sweep_idle`.
            unsafe { self.table.rebuild(&mut shard.occupancy, index) };
        }
    }
}

/// Where `state` stands at `now_ns` under `policy`, a ban lasting until
/// `banned_until_ns` included (nothing left until then).
fn standing_of<P: Policy>(
    policy: &P,
    state: &P::State,
    now_ns: u64,
    banned_until_ns: u64,
) -> Standing {
    let mut s = policy.standing(state, now_ns);
    if banned_until_ns > now_ns {
        s.remaining = 0;
        s.reset_ns = s.reset_ns.max(banned_until_ns - now_ns);
    }
    s
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

/// A keyed limiter of any policy, behind one object-safe face.
pub(crate) trait Keyed: Send + Sync + fmt::Debug {
    fn check(
        &self,
        key: &str,
        now_ns: u64,
        cost: u64,
        ban_ns: Option<u64>,
        standing: bool,
    ) -> BanCheck;
    fn window_ns(&self) -> u64;
    fn settle(&self, key: &str, now_ns: u64, delta: i64);
    /// As `settle`, and with `standing`, where the key stands after it.
    fn settle_with(&self, key: &str, now_ns: u64, delta: i64, standing: bool) -> Option<Standing>;
    fn quota(&self) -> u64;
    fn max_cost(&self) -> u64;
    fn len(&self) -> usize;
    fn banned(&self, now_ns: u64) -> usize;
    fn sweep(&self, now_ns: u64);
}

impl<P: Policy> Keyed for KeyedLimiter<P, Box<str>> {
    fn check(
        &self,
        key: &str,
        now_ns: u64,
        cost: u64,
        ban_ns: Option<u64>,
        standing: bool,
    ) -> BanCheck {
        self.check_with(key, now_ns, cost, ban_ns, standing)
    }
    fn window_ns(&self) -> u64 {
        self.policy().window_ns()
    }
    fn settle(&self, key: &str, now_ns: u64, delta: i64) {
        KeyedLimiter::settle(self, key, now_ns, delta)
    }
    fn settle_with(&self, key: &str, now_ns: u64, delta: i64, standing: bool) -> Option<Standing> {
        KeyedLimiter::settle_with(self, key, now_ns, delta, standing)
    }
    fn quota(&self) -> u64 {
        self.policy().quota()
    }
    fn max_cost(&self) -> u64 {
        self.policy().max_cost()
    }
    fn len(&self) -> usize {
        KeyedLimiter::len(self)
    }
    fn banned(&self, now_ns: u64) -> usize {
        KeyedLimiter::banned(self, now_ns)
    }
    fn sweep(&self, now_ns: u64) {
        KeyedLimiter::sweep(self, now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, FixedWindowState, TokenPoolState};
    use std::collections::HashMap;
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
    fn update_runs_on_the_state_check_uses_and_counts_as_a_use() {
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), 1000);
        // A wider limit on the same counter: 2 of 3 taken.
        let three = window(3);
        assert_eq!(
            store.update(&7, 0, |_, s| three.check(s, 0, 2)),
            Verdict::Admit { remaining: 1 }
        );
        // The store's own policy (limit 1) sees those 2.
        assert!(!store.check(&7, 10, 1).is_admitted());
        // A use at 50 keeps the key from being idle at 120.
        store.update(&7, 50, |_, _| ());
        store.sweep(120);
        assert_eq!(store.len(), 1);
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
        assert!(!store.check_with(&7, 0, 1, Some(1000), false).banned);
        let c = store.check_with(&7, 10, 1, Some(1000), false);
        // The window ends at 100; the ban lasts 1000 more.
        assert_eq!(
            c.verdict,
            Verdict::Reject {
                retry_after_ns: 1090
            }
        );
        assert!(c.ban_started);
        assert_eq!(store.banned(10), 1);
        let c = store.check_with(&7, 500, 1, Some(1000), false);
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
            .check_with(&7, 1100, 1, Some(1000), false)
            .verdict
            .is_admitted());
    }

    #[test]
    fn a_u64_key_with_a_token_pool_takes_one_cache_line() {
        assert_eq!(
            std::mem::size_of::<tollgate_table::Slot<u64, TokenPoolState>>(),
            64
        );
        assert_eq!(
            std::mem::size_of::<tollgate_table::Slot<Box<str>, TokenPoolState>>(),
            128
        );
        // 4 shards of 256 keys, 342 slots each, and one slot of room to
        // align them.
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), 1024);
        assert_eq!(store.max_keys(), 1024);
        assert_eq!(store.table_bytes(), (4 * 342 + 1) * 64);
    }

    #[test]
    fn max_keys_is_capped() {
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(window(1), usize::MAX);
        assert_eq!(store.max_keys(), KeyedLimiter::<FixedWindow, u64>::MAX_KEYS);
        assert!(store.check(&1, 0, 1).is_admitted());
    }

    /// The store's eviction rules on a plain map, for one shard.
    struct Model {
        keys: HashMap<u64, (FixedWindowState, u64)>,
        cap: usize,
        idle_ns: u64,
        last_sweep_ns: u64,
        evictions: Evictions,
    }

    impl Model {
        fn check(&mut self, policy: &FixedWindow, key: u64, now_ns: u64) -> Verdict {
            if !self.keys.contains_key(&key) {
                let due = now_ns - self.last_sweep_ns >= self.idle_ns;
                if due || self.keys.len() >= self.cap {
                    let before = self.keys.len();
                    let idle_ns = self.idle_ns;
                    self.keys.retain(|_, (_, t)| now_ns - *t < idle_ns);
                    self.evictions.idle += (before - self.keys.len()) as u64;
                    self.last_sweep_ns = now_ns;
                }
                if self.keys.len() >= self.cap {
                    let mut times: Vec<u64> = self.keys.values().map(|e| e.1).collect();
                    times.sort_unstable();
                    let n = (times.len() / 8).max(1);
                    self.keys.retain(|_, (_, t)| *t > times[n - 1]);
                    self.evictions.full += n as u64;
                }
                self.keys.insert(key, (policy.new_state(now_ns), now_ns));
            }
            let (state, time) = self.keys.get_mut(&key).unwrap();
            *time = now_ns;
            policy.check(state, now_ns, 1)
        }
    }

    #[test]
    fn decisions_match_a_map_through_evictions_and_rebuilds() {
        // One shard of 64 keys in 86 slots; 200 keys churn through it, so
        // slots are emptied, reused and rebuilt many times over.
        let policy = FixedWindow::new(2, Duration::from_nanos(3000)).unwrap();
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(policy.clone(), 64);
        let mut model = Model {
            keys: HashMap::new(),
            cap: 64,
            idle_ns: policy.idle_ns(),
            last_sweep_ns: 0,
            evictions: Evictions::default(),
        };
        let (mut rng, mut now) = (0x9E37_79B9_7F4A_7C15u64, 0);
        for step in 0..50_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Distinct times, so that the oldest eighth is one set of keys.
            now += 1 + rng % 64;
            // A skewed key: low keys often, high keys rarely.
            let key = (rng >> 20) % (1 + (rng >> 40) % 200);
            assert_eq!(
                store.check(&key, now, 1),
                model.check(&policy, key, now),
                "step {step}, key {key}"
            );
        }
        assert_eq!(store.len(), model.keys.len());
        assert_eq!(store.evictions(), model.evictions);
        assert!(model.evictions.full > 1000, "{:?}", model.evictions);
        assert!(model.evictions.idle > 1000, "{:?}", model.evictions);
    }

    #[test]
    fn threads_sharing_keys_never_lose_or_double_a_decision() {
        // 4 threads x 20,000 checks over 16 keys (5,000 per key), with a
        // limit of 4,000 per key: exactly 64,000 admitted.
        let policy = FixedWindow::new(4000, Duration::from_secs(1)).unwrap();
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(policy, 1024);
        let admitted: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let store = &store;
                    scope.spawn(move || {
                        (0..20_000u64)
                            .filter(|i| store.check(&((i + t) % 16), *i, 1).is_admitted())
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 64_000);
        assert_eq!(store.len(), 16);
    }

    #[test]
    fn concurrent_churn_inserts_each_key_once_per_admission() {
        // 4 shards of 256 keys; 4 threads each insert 20,000 fresh keys
        // (each admitted once) and check 8 shared keys between them. With
        // a limit of 1 per window and every time inside one window, a key
        // is admitted exactly once per insertion, so every insertion is
        // either still held or counted as evicted.
        let policy = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
        let store: KeyedLimiter<_, u64> = KeyedLimiter::new(policy, 1024);
        let shared_admitted: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let store = &store;
                    scope.spawn(move || {
                        let mut shared = 0;
                        for i in 0..20_000u64 {
                            let fresh = (t << 32) | i;
                            assert!(store.check(&fresh, i, 1).is_admitted());
                            if store.check(&(1 << 40 | (i % 8)), i, 1).is_admitted() {
                                shared += 1;
                            }
                        }
                        shared
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let ev = store.evictions();
        assert_eq!(ev.idle, 0);
        assert!(store.len() <= 1024);
        assert_eq!(
            ev.full + store.len() as u64,
            4 * 20_000 + shared_admitted,
            "{ev:?}, {} held",
            store.len()
        );
    }
}
