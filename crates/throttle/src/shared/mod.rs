//! [`RedisStore`]: the throttler's keyed state in Redis, shared by every
//! replica of a service, decided by one script call per request.
//!
//! # Implementation notes
//!
//! Each policy's step (the fixed window, the sliding window counter, the
//! sliding log, GCRA and the token pool) is Lua (`decide.lua`, with the
//! sliding log's and the token pool's steps in files of their own) with
//! the Rust policy's exact integer arithmetic (Redis' Lua has only
//! doubles): on doubles while numbers stay below 2^48, with the time as
//! seconds and nanoseconds, and on multi-limb integers above (a GCRA's
//! and a token pool's tokens). A check of one fixed window, sliding
//! window counter, GCRA or token pool on small numbers runs on doubles
//! alone (`gcra_fast.lua` and `token_pool_fast.lua` hold the last two),
//! before the script defines anything else, and hands over to the
//! general path wherever a bound could be passed. The script is loaded
//! once and called by its SHA-1 (`EVALSHA`,
//! loaded again on `NOSCRIPT`). One call decides every limit a request
//! meets, in rule order, and charges nothing when an enforced limit
//! rejects, so a rejected request costs nothing without a refund (on a
//! Cluster, one call per slot, see [`RedisStore::check_items`]); it
//! writes then only what the rejection leaves in memory too: a ban, a
//! sliding log's logged rejections, a token pool's refill. The
//! clock is Redis' `TIME`, so replicas with skewed clocks agree; a store
//! built with [`RedisStoreBuilder::clock`] passes that clock's time
//! instead (tests).
//!
//! A key is `PREFIX{KEY}:RULE:LIMIT`: the braces are Redis Cluster's hash
//! tag, so every limit of every rule on one key (an API key's per-second
//! and per-hour rules, a rule's hard and soft limits) sits in one slot and
//! is decided in one call there; a limit's parameters are part of the
//! name, so a changed limit starts fresh as it does in memory. A rule's
//! ban is the key `…:b` beside its limit's, holding the ban's end; the
//! call reads it before the limit and writes it when a rejection starts
//! a ban, whatever the request's fate. Each key expires when it would decide like
//! a fresh one (a GCRA's debt included), so Redis holds only active keys.
//!
//! Two things spare Redis calls: the over-limit cache (`cache.rs`)
//! answers a key that Redis rejected for every cost, as Redis would, until
//! it could admit again; slices (`slices.rs`) let a replica take several
//! of a hot key's tokens in one call and spend them itself, the replicas
//! together still admitting at most the limit.
//!
//! Checks coalesce (`batch.rs`): while every connection has a call in
//! flight, checks that arrive wait and then go as one script call, which
//! decides them in arrival order, each whole, as if sent one by one. A
//! check still waits for at most one call before its own, never past the
//! deadline.
//!
//! The connections: `pool_size` multiplexed connections, used in turn
//! (requests pipeline on each). A call that fails on a broken connection
//! marks it broken; its task reconnects with exponential backoff and
//! jitter while calls answer at once by the store's [`OnError`] mode.
//! Every call has a deadline, so no request waits longer for Redis.

mod batch;
mod builder;
mod cache;
pub(crate) mod script;
mod slices;
mod slots;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::Clock;

use crate::policy::{Standing, Verdict};
use crate::rules::{Limit, Rule};
pub use builder::RedisStoreBuilder;
use cache::OverLimit;
pub(crate) use script::{Answer, Item, Params, Reply, Role};
use slices::Slices;
pub(crate) use slices::Spent;
use slots::{groups, groups_of, hash_tag};
use tollgate_service::redis_link::{Link, LinkSettings};

/// How often expired slices are returned.
const SWEEP: Duration = Duration::from_millis(5);

pub use tollgate_service::redis_link::{OnError, StoreError};

/// Keyed limits kept in Redis, shared by every throttler (and every
/// replica) that uses the same Redis, key prefix and rule names.
///
/// Keeps [`FixedWindow`](crate::FixedWindow),
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingLog`](crate::SlidingLog), [`Gcra`](crate::Gcra) and
/// [`TokenPool`](crate::TokenPool) limits with the same integer
/// arithmetic, and so the same decisions, as the in-memory
/// [`KeyedLimiter`](crate::KeyedLimiter).
/// Cloning is cheap and shares the connections.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate_throttle::{FixedWindow, Limit, OnError, RedisStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379")
///     .deadline(Duration::from_millis(10))
///     .on_error(OnError::Local)
///     .replicas(3)
///     .connect()
///     .await?;
/// let limit = Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(1))?);
/// let verdict = store.check(&limit, "alice", 1).await?;
/// assert!(verdict.is_admitted());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    link: Link,
    script: redis::Script,
    prefix: String,
    deadline: Duration,
    on_error: OnError,
    replicas: u32,
    clock: Option<Arc<dyn Clock>>,
    /// Keys over their limit, answered here.
    cache: OverLimit,
    /// Tokens of sliced keys held here.
    slices: Slices,
    /// The task returning expired slices, started with the first.
    sweeper: std::sync::OnceLock<()>,
    /// Checks waiting for a call.
    batcher: batch::Batcher,
}

impl RedisStore {
    /// A store at `url`: `redis://[user:password@]host:port[/db]`,
    /// `rediss://` (TLS, the system's roots or
    /// [`ca`](RedisStoreBuilder::ca)),
    /// `redis+sentinel://host:port[,host:port...]/MASTER[/db]`, or a
    /// comma-separated list of two or more `redis://` URLs: a Redis
    /// Cluster's seed nodes.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }

    /// Checks that `url` can be parsed, without connecting.
    ///
    /// # Errors
    ///
    /// As [`RedisStoreBuilder::connect`] for a bad URL.
    pub fn check_url(url: &str) -> Result<(), StoreError> {
        LinkSettings::new(url, "").check()
    }

    /// What decisions do when Redis fails.
    pub fn on_error(&self) -> OnError {
        self.inner.on_error
    }

    /// The replicas sharing the limits.
    pub fn replicas(&self) -> u32 {
        self.inner.replicas
    }

    /// The longest a call waits for Redis.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// Whether `limit` can be kept in Redis: every limit can.
    ///
    /// Redis keeps [`FixedWindow`](crate::FixedWindow),
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter),
    /// [`SlidingLog`](crate::SlidingLog) (with or without
    /// [`log_rejected`](crate::SlidingLog::log_rejected)),
    /// [`Gcra`](crate::Gcra) and [`TokenPool`](crate::TokenPool) (with a
    /// burst ratio or [`with_burst`](crate::TokenPool::with_burst), its
    /// backlog cap and [`with_clock_step`](crate::TokenPool::with_clock_step)
    /// sizes as given), each deciding exactly as in memory. A token pool's
    /// key holds the limiter core's pool (the active level, the capped
    /// backlog, the meter's carry, the last fill's time and the debt),
    /// refilled with the core's `Pool::fill` arithmetic on the script's
    /// multi-limb integers. As the in-memory store drops an idle key, the
    /// key expires once a refill would make it a fresh one, and with it
    /// the fraction of a token the meter carried.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_throttle::{Limit, RedisStore, SlidingLog, TokenPool};
    ///
    /// let log = SlidingLog::new(20, Duration::from_secs(10))?.log_rejected(true);
    /// assert!(RedisStore::supports(&Limit::SlidingLog(log)).is_ok());
    /// let pool = Limit::TokenPool(TokenPool::new("5,2".parse()?));
    /// assert!(RedisStore::supports(&pool).is_ok());
    /// let bucket = Limit::TokenPool(TokenPool::new("5".parse()?).with_burst(10)?);
    /// assert!(RedisStore::supports(&bucket).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// None today: the `Result` is for a limit the store could not keep,
    /// as one line saying which limits it can.
    pub fn supports(limit: &Limit) -> Result<(), StoreError> {
        Params::of(limit).map(|_| ())
    }

    /// Whether every limit of `rule` can be kept in Redis (a throttler
    /// built with this store refuses a rule that cannot): its limits (see
    /// [`supports`](Self::supports)), its [`ban`](Rule::ban) (a key of its
    /// own beside the limit's, read in the same script call) and its
    /// [`slice`](Rule::slice), kept only where the replicas spending it
    /// stay exact.
    ///
    /// # Errors
    ///
    /// A [`slice`](Rule::slice) on a GCRA, a token pool or a sliding
    /// log, beside a ban or a soft limit or on a shadow rule: one line
    /// naming the rule.
    pub fn supports_rule(rule: &Rule) -> Result<(), StoreError> {
        let named = |e: StoreError| match e {
            StoreError::Config(m) => StoreError::Config(format!("rule \"{}\": {m}", rule.name())),
            StoreError::Unsupported(m) => {
                StoreError::Unsupported(format!("rule \"{}\": {m}", rule.name()))
            }
            other => other,
        };
        Params::of(&rule.hard).map_err(named)?;
        if let Some(soft) = &rule.soft {
            Params::of(soft).map_err(named)?;
        }
        if rule.slice > 0 {
            if matches!(rule.hard, Limit::Gcra(_)) {
                return Err(named(StoreError::Unsupported(
                    ("a gcra takes no slices (tokens spent after they were taken would let \
                     the bucket refill under them): use fixed_window or \
                     sliding_window_counter, or drop the slice")
                        .into(),
                )));
            }
            if matches!(rule.hard, Limit::TokenPool(_)) {
                return Err(named(StoreError::Unsupported(
                    ("a token pool takes no slices (tokens spent after they were taken \
                     would let the pool refill under them): use fixed_window or \
                     sliding_window_counter, or drop the slice")
                        .into(),
                )));
            }
            if rule.ban.is_some() {
                return Err(named(StoreError::Unsupported(
                    ("a rule with a slice has no ban (a replica spends its slice without \
                     asking Redis, so it would not see the ban): drop one")
                        .into(),
                )));
            }
            if matches!(rule.hard, Limit::SlidingLog(_)) {
                return Err(named(StoreError::Unsupported(
                    ("a sliding log takes no slices (each entry is logged at the time of \
                     its own request): use fixed_window or sliding_window_counter, or drop \
                     the slice")
                        .into(),
                )));
            }
            if rule.soft.is_some() {
                return Err(named(StoreError::Unsupported(
                    ("a rule with a slice has no soft limit (it would need Redis on every \
                     request): drop one")
                        .into(),
                )));
            }
            if rule.mode != crate::Mode::Enforce {
                return Err(named(StoreError::Unsupported(
                    ("a shadow rule takes no slices: drop the slice").into(),
                )));
            }
        }
        Ok(())
    }

    /// Decides a request of `cost` for `key` under `limit` (the key's own
    /// state, apart from any throttler's rules), at Redis' time or the
    /// builder's clock.
    ///
    /// # Errors
    ///
    /// A limit the store cannot keep, Redis' error, or no answer within the
    /// deadline. Nothing is decided then: the caller applies its own
    /// fallback.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the decision made in Redis, unknown
    /// to the caller.
    pub async fn check(&self, limit: &Limit, key: &str, cost: u64) -> Result<Verdict, StoreError> {
        let now = self.inner.clock.as_ref().map(|c| c.now_ns());
        self.check_one(limit, key, now, cost).await
    }

    /// As [`check`](Self::check), at `now_ns` nanoseconds (since the Unix
    /// epoch, for windows aligned as Redis' own time aligns them).
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub async fn check_at(
        &self,
        limit: &Limit,
        key: &str,
        now_ns: u64,
        cost: u64,
    ) -> Result<Verdict, StoreError> {
        self.check_one(limit, key, Some(now_ns), cost).await
    }

    /// Post-accounting for `key` under `limit` at `now_ns`: see
    /// [`Policy::settle`](crate::Policy::settle).
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub async fn settle_at(
        &self,
        limit: &Limit,
        key: &str,
        now_ns: u64,
        delta: i64,
    ) -> Result<(), StoreError> {
        let item = Item {
            key: self.key_name(None, key, &Params::of(limit)?, ""),
            params: Params::of(limit)?,
            role: Role::Hard,
            amount: i128::from(delta),
            slice: 0,
            slice_ns: 0,
        };
        self.call("settle", Some(now_ns), &[item]).await.map(|_| ())
    }

    /// Decides each of `checks` (a limit, a key and a cost) on its own, at
    /// the store's time: one over its limit charges nothing and leaves the
    /// others be, as independent requests would. Returns the time decided
    /// at (nanoseconds since the Unix epoch, or the builder's clock) and,
    /// per check in order, its verdict and where its key stands after it.
    ///
    /// One script call on a standalone Redis or Sentinel; on a Cluster,
    /// one per hash slot (a key is its own hash tag), in order of first
    /// appearance. Two checks on one key and limit count in turn on one
    /// state.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate_throttle::{FixedWindow, Limit, RedisStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
    /// let second = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(1))?);
    /// let hour = Limit::FixedWindow(FixedWindow::new(1000, Duration::from_secs(3600))?);
    /// let (_now_ns, answers) = store.check_each(&[(&second, "alice", 1), (&hour, "bob", 5)]).await?;
    /// assert!(answers[1].0.is_admitted());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); nothing is known decided then.
    ///
    /// # Cancel safety
    ///
    /// As [`check`](Self::check).
    pub async fn check_each(
        &self,
        checks: &[(&Limit, &str, u64)],
    ) -> Result<(u64, Vec<(Verdict, Standing)>), StoreError> {
        self.check_each_cached(checks, &[]).await
    }

    /// As [`check_each`](Self::check_each), where the over-limit cache
    /// answers each check `i` with `cached[i]` set whose key it knows
    /// over its limit for every cost (until the time one could be
    /// admitted), with no Redis call, as Redis would answer it; and learns
    /// such keys from Redis' rejections of them. Exact only for keys whose
    /// count nothing lowers meanwhile: no negative
    /// [`settle_at`](Self::settle_at) on them, by any replica. A store
    /// built with [`over_limit_cache(0)`](RedisStoreBuilder::over_limit_cache),
    /// or on a Redis Cluster, keeps nothing.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); nothing is known decided then.
    ///
    /// # Cancel safety
    ///
    /// As [`check`](Self::check).
    pub async fn check_each_cached(
        &self,
        checks: &[(&Limit, &str, u64)],
        cached: &[bool],
    ) -> Result<(u64, Vec<(Verdict, Standing)>), StoreError> {
        let cache = self.inner.cache.enabled() && !self.inner.link.is_cluster();
        let mut known: Vec<Option<(Verdict, Standing)>> = vec![None; checks.len()];
        let mut items = Vec::with_capacity(checks.len());
        let mut asked = Vec::with_capacity(checks.len());
        for (i, &(limit, key, cost)) in checks.iter().enumerate() {
            let params = Params::of(limit)?;
            let key = self.key_name(None, key, &params, "");
            let cacheable = cache && cached.get(i).copied().unwrap_or(false);
            if let Some(answer) = cacheable
                .then(|| self.inner.cache.answer(&key, cost, true))
                .flatten()
            {
                if let Some(verdict) = answer.verdict {
                    known[i] = Some((verdict, answer.standing));
                    continue;
                }
            }
            asked.push((i, cacheable, cost));
            items.push(Item {
                key,
                params,
                role: Role::Shadow,
                amount: i128::from(cost),
                slice: 0,
                slice_ns: 0,
            });
        }
        let now = self.now();
        if items.is_empty() {
            let at = now.unwrap_or_else(unix_now);
            let out = known.into_iter().flatten().collect();
            return Ok((at, out));
        }
        if !self.inner.link.is_cluster() {
            let sent = Instant::now();
            let reply = self.call_reply("standing", now, &items).await?;
            // The script sends the stored state of the first item alone.
            if let Some(&(_, true, cost)) = asked.first() {
                self.inner.cache.learn(&items[0], cost, &reply, sent);
            }
            for (&(i, _, _), answer) in asked.iter().zip(&reply.answers) {
                let verdict = answer
                    .verdict
                    .ok_or_else(|| StoreError::Redis(("the script decided nothing").into()))?;
                known[i] = Some((verdict, answer.standing));
            }
            let out = known.into_iter().flatten().collect();
            return Ok((reply.now, out));
        }
        let groups = groups(&items);
        let mut at = None;
        let mut answers = vec![None; items.len()];
        for group in &groups {
            let part: Vec<Item> = group.iter().map(|&i| items[i].clone()).collect();
            let (t, got) = self.call("standing", now, &part).await?;
            at.get_or_insert(t);
            for (&i, answer) in group.iter().zip(got) {
                answers[i] = Some(answer);
            }
        }
        let mut out = Vec::with_capacity(items.len());
        for answer in answers {
            let answer =
                answer.ok_or_else(|| StoreError::Redis(("the script skipped a check").into()))?;
            let verdict = answer
                .verdict
                .ok_or_else(|| StoreError::Redis(("the script decided nothing").into()))?;
            out.push((verdict, answer.standing));
        }
        Ok((at.or(now).unwrap_or(0), out))
    }

    async fn check_one(
        &self,
        limit: &Limit,
        key: &str,
        now: Option<u64>,
        cost: u64,
    ) -> Result<Verdict, StoreError> {
        let params = Params::of(limit)?;
        let item = Item {
            key: self.key_name(None, key, &params, ""),
            params,
            role: Role::Hard,
            amount: i128::from(cost),
            slice: 0,
            slice_ns: 0,
        };
        let (_, answers) = self.call("check", now, &[item]).await?;
        answers[0]
            .verdict
            .ok_or_else(|| StoreError::Redis(("the script decided nothing").into()))
    }

    /// The Redis key of `key` under a limit of `rule` (`None`: no rule).
    pub(crate) fn key_name(
        &self,
        rule: Option<&str>,
        key: &str,
        params: &Params,
        suffix: &str,
    ) -> String {
        match rule {
            Some(rule) => format!(
                "{}{{{key}}}:{rule}:{}{suffix}",
                self.inner.prefix, params.id
            ),
            None => format!("{}{{{key}}}:{}{suffix}", self.inner.prefix, params.id),
        }
    }

    /// The time the store decides at: its clock's, or `None` for Redis'.
    pub(crate) fn now(&self) -> Option<u64> {
        self.inner.clock.as_ref().map(|c| c.now_ns())
    }

    /// Decides `items` (in rule order) at the store's time: one script
    /// call, or on a Redis Cluster one call per hash slot's group of keys.
    /// With `standing`, each answer says where its key stands after it
    /// (otherwise zero: the script skips that arithmetic). With `cache`,
    /// the over-limit cache answers when it knows the first item (an
    /// enforced hard limit) rejects, and learns Redis' rejections; the
    /// flag says whether it answered.
    ///
    /// # Implementation notes
    ///
    /// A Cluster runs one script only on keys of one slot, so there the
    /// items are grouped by hash tag (the request's key under each rule)
    /// and each group decided in its own call, in the order the groups
    /// first appear. A group charges nothing when one of its enforced
    /// limits rejects; if any group rejected, the first enforced rejection
    /// in rule order is the request's, the items after it count as not
    /// decided, and every group that did charge is refunded (a settlement
    /// of minus the cost), as the in-memory store refunds earlier rules.
    pub(crate) async fn check_items(
        &self,
        items: &[Item],
        standing: bool,
        cache: bool,
    ) -> Result<(Vec<Answer>, bool), StoreError> {
        let first = items
            .first()
            .filter(|i| {
                cache
                    && i.role == Role::Hard
                    && i.slice == 0
                    && self.inner.cache.enabled()
                    && !self.inner.link.is_cluster()
            })
            .and_then(|i| Some((i, u64::try_from(i.amount).ok()?)));
        if let Some((item, cost)) = first {
            if let Some(answer) = self.inner.cache.answer(&item.key, cost, standing) {
                let mut answers = vec![
                    Answer {
                        verdict: None,
                        standing: crate::policy::Standing {
                            remaining: 0,
                            reset_ns: 0,
                        },
                        taken: 0,
                        banned: false,
                        ban_started: false,
                    };
                    items.len()
                ];
                answers[0] = answer;
                return Ok((answers, true));
            }
        }
        let sent = Instant::now();
        let now = self.now();
        let op = if standing { "standing" } else { "check" };
        let groups = if self.inner.link.is_cluster() {
            groups(items)
        } else {
            vec![(0..items.len()).collect()]
        };
        if groups.len() == 1 {
            let reply = self.call_reply(op, now, items).await?;
            if let Some((item, cost)) = first {
                self.inner.cache.learn(item, cost, &reply, sent);
            }
            let nows = vec![reply.now; items.len()];
            self.grant(items, &reply.answers, &nows, sent);
            return Ok((reply.answers, false));
        }
        let mut answers = vec![None; items.len()];
        let mut nows = vec![0; items.len()];
        for group in &groups {
            let part: Vec<Item> = group.iter().map(|&i| items[i].clone()).collect();
            let reply = self.call_reply(op, now, &part).await?;
            for (&i, answer) in group.iter().zip(reply.answers) {
                answers[i] = Some(answer);
                nows[i] = reply.now;
            }
        }
        let mut answers: Vec<Answer> = answers.into_iter().flatten().collect();
        let rejected_at = items.iter().zip(&answers).position(|(item, a)| {
            item.role == Role::Hard && a.verdict.is_some_and(|v| !v.is_admitted())
        });
        let Some(at) = rejected_at else {
            self.grant(items, &answers, &nows, sent);
            return Ok((answers, false));
        };
        let mut refunds = Vec::new();
        for group in &groups {
            let rejected = group.iter().any(|&i| {
                items[i].role == Role::Hard && answers[i].verdict.is_some_and(|v| !v.is_admitted())
            });
            if rejected {
                continue;
            }
            for &i in group {
                if answers[i].verdict.is_some_and(|v| v.is_admitted()) {
                    let mut refund = items[i].clone();
                    refund.role = Role::Hard;
                    // A slice taken is refunded whole.
                    refund.amount = match answers[i].taken {
                        0 => -refund.amount,
                        taken => -i128::from(taken),
                    };
                    refunds.push(refund);
                }
            }
        }
        for a in &mut answers[at + 1..] {
            a.verdict = None;
        }
        for group in groups_of(refunds) {
            // A refund lost to Redis leaves the charge: logged by the link.
            let _ = self.call("settle", now, &group).await;
        }
        Ok((answers, false))
    }

    /// Keeps the slices `answers` took, unless an enforced item rejected
    /// (the script then wrote nothing), at each item's Redis time `nows`.
    fn grant(&self, items: &[Item], answers: &[Answer], nows: &[u64], sent: Instant) {
        let rejected = items.iter().zip(answers).any(|(item, a)| {
            item.role == Role::Hard && a.verdict.is_some_and(|v| !v.is_admitted())
        });
        if rejected {
            return;
        }
        let mut any = false;
        for ((item, answer), &now) in items.iter().zip(answers).zip(nows) {
            if answer.taken > 0 {
                self.inner.slices.grant(item, answer, now, sent);
                any = true;
            }
        }
        if any {
            self.inner.sweeper.get_or_init(|| self.sweep());
        }
    }

    /// Starts the task that returns expired slices every [`SWEEP`]: it
    /// ends with the store.
    fn sweep(&self) {
        let store = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SWEEP).await;
                let Some(inner) = store.upgrade() else {
                    return;
                };
                RedisStore { inner }.give_back().await;
            }
        });
    }

    /// Returns the unused tokens of every expired slice: one call per
    /// hash tag (a return lost to Redis leaves them counted, logged by the
    /// link).
    pub(crate) async fn give_back(&self) {
        let gives = self.inner.slices.expired();
        if gives.is_empty() {
            return;
        }
        for group in groups_of(gives) {
            let _ = self.call("give", self.now(), &group).await;
        }
    }

    /// Spends `cost` of the slice this replica holds of `key`, if any.
    pub(crate) fn spend(&self, key: &str, cost: u64) -> Spent {
        self.inner.slices.spend(key, cost)
    }

    /// Gives `cost` back to the slice of `key` in window `index`.
    pub(crate) fn unspend(&self, key: &str, index: u64, cost: u64) {
        self.inner.slices.unspend(key, index, cost);
    }

    /// Runs the script on `items`, within the deadline.
    pub(crate) async fn call(
        &self,
        op: &str,
        now: Option<u64>,
        items: &[Item],
    ) -> Result<(u64, Vec<Answer>), StoreError> {
        self.call_reply(op, now, items)
            .await
            .map(|reply| (reply.now, reply.answers))
    }

    /// As [`call`](Self::call), with the whole reply: a check joins the
    /// next batch while every connection has a call in flight
    /// (`batch.rs`).
    async fn call_reply(
        &self,
        op: &str,
        now: Option<u64>,
        items: &[Item],
    ) -> Result<Reply, StoreError> {
        match op {
            "check" => batch::check(&self.inner, "check", now, items).await,
            "standing" => batch::check(&self.inner, "standing", now, items).await,
            _ => invoke(&self.inner, op, now, items).await,
        }
    }
}

/// Runs the script on `items` alone, within the deadline.
async fn invoke(
    inner: &StoreInner,
    op: &str,
    now: Option<u64>,
    items: &[Item],
) -> Result<Reply, StoreError> {
    let mut invocation = inner.script.prepare_invoke();
    for item in items {
        invocation.key(&item.key);
    }
    invocation.arg(op);
    match now {
        Some(t) => invocation.arg(t),
        None => invocation.arg(""),
    };
    invocation.arg(items.len());
    script::push_args(&mut invocation, items);
    let reply: Vec<String> = inner.link.invoke(&invocation, inner.deadline).await?;
    script::answers(&reply, items.len())
}

/// The local time in nanoseconds since the Unix epoch: Redis' `TIME`
/// as near as this host knows it.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("link", &self.inner.link)
            .field("prefix", &self.inner.prefix)
            .field("deadline", &self.inner.deadline)
            .field("on_error", &self.inner.on_error)
            .field("replicas", &self.inner.replicas)
            .finish_non_exhaustive()
    }
}
