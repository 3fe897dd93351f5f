//! [`RateLimitService`]: the `ShouldRateLimit` decision on domain types.
//!
//! # Implementation notes
//!
//! One call, as the reference makes it: every descriptor finds its limits
//! (a request's override when the domain is known, else the tree walk of
//! `matching.rs`); the `replaces` names of every matched limit knock out
//! the limits so named; each remaining limit is counted (`counter.rs`)
//! with the descriptor's hits (its own `hits_addend` when set, 0
//! included, else the request's, at least 1); the statuses, the overall
//! code (quota descriptors fail the request only all together; global
//! shadow mode answers OK whatever) and the headers follow.
//!
//! With several limits on one descriptor (tollgate's extension) each is
//! counted and the descriptor's status is the one closest to its limit: the
//! first over its limit, else the one with the least remaining. A request
//! over any of them is charged to every fixed window (which count every
//! hit, as the reference's do) and to none of the smooth limits (which
//! charge only what they admit: the ones that admitted it give it back).
//!
//! A call runs in three steps: the plan (matching, `replaces`, hits), the
//! count of every limit to count (`Job`s, in descriptor order), and the
//! answer from the counts. The count is the in-memory tables' or, with a
//! Redis store, one script call for all of them (`shared.rs`); when Redis
//! fails, the store's `on_error` mode stands in for the counts.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tollgate::Clock;
use tollgate_service::{LockUnpoisoned, NotReady, Readiness, RwLockUnpoisoned};
use tollgate_throttle::{OnError, RedisStore};
use tracing::error;

use super::config::{ConfigError, ConfiguredLimit, RlsConfig};
use super::counter::{Counted, Counters, Touch};
use super::job::Job;
use super::matching;
use super::metrics::RlsMetrics;
use super::request::{Code, CurrentLimit, DescriptorStatus, Request, RequestError, Response};
use super::settings::RlsSettings;
use super::shared::Shared;
use super::Unit;

/// The rate limit service: a configuration, counters and a clock.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tollgate::ManualClock;
/// use tollgate_rls::{Code, Descriptor, RateLimitService, Request, RlsConfig, RlsSettings};
///
/// let config = RlsConfig::from_yaml("edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")?;
/// let clock = ManualClock::new();
/// clock.set_ns(1_700_000_040 * 1_000_000_000);
/// let service = RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(clock));
/// let request = Request {
///     domain: "edge".into(),
///     descriptors: vec![Descriptor::new([("remote_address", "1.2.3.4")])],
///     hits_addend: 0,
/// };
/// assert_eq!(service.should_rate_limit(&request)?.overall_code, Code::Ok);
/// assert_eq!(service.should_rate_limit(&request)?.overall_code, Code::OverLimit);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RateLimitService {
    config: RwLock<Option<Arc<RlsConfig>>>,
    counters: Counters,
    clock: Arc<dyn Clock>,
    settings: RlsSettings,
    metrics: RlsMetrics,
    /// The Redis store the counters live in; `None`: in memory.
    shared: Option<Shared>,
    /// Ready once a configuration is loaded (the debug port's `/healthz`).
    readiness: Readiness,
    /// Held while no configuration is loaded.
    unconfigured: Mutex<Option<NotReady>>,
    /// Configurations put in force since the service was made.
    generation: AtomicU64,
}

/// What one descriptor matched.
enum Matched<'a> {
    /// No limit applies.
    None,
    /// An unlimited rule (with the node's limits, for their `replaces`).
    Unlimited(&'a [Arc<ConfiguredLimit>]),
    /// Limits to count (those `replaces` names aside), with the counter
    /// key.
    Rules(&'a [Arc<ConfiguredLimit>], String),
    /// A request's override, with the counter key.
    Override(Arc<ConfiguredLimit>, String),
}

/// A request matched: what each descriptor matched, the limit names
/// `replaces` knocks out, and each descriptor's hits.
struct Plan<'c> {
    matched: Vec<Matched<'c>>,
    replaced: HashSet<&'c str>,
    hits: Vec<u64>,
}

impl Plan<'_> {
    /// Every limit to count, descriptor by descriptor, with `hits` per
    /// descriptor.
    fn jobs(&self, hits: &[u64]) -> Vec<Job<'_>> {
        let mut jobs = Vec::with_capacity(self.matched.len());
        for (desc, (m, &hits)) in self.matched.iter().zip(hits).enumerate() {
            let (rules, key): (&[Arc<ConfiguredLimit>], &str) = match m {
                Matched::Rules(rules, key) => (rules, key),
                Matched::Override(rule, key) => (std::slice::from_ref(rule), key),
                Matched::None | Matched::Unlimited(_) => continue,
            };
            for rule in rules {
                if is_replaced(rule, &self.replaced) {
                    continue;
                }
                let key = if rule.slot == 0 {
                    key.to_owned()
                } else {
                    format!("{key}#{}", rule.slot)
                };
                jobs.push(Job {
                    desc,
                    rule,
                    key,
                    hits,
                });
            }
        }
        jobs
    }
}

/// With `stop incrementing when over limit`: when any descriptor would go
/// over (a probe's `counted`), only those that go over are charged.
fn stop_increment(jobs: &[Job<'_>], counted: &[Counted], charge: &mut [u64]) {
    let mut over = vec![false; charge.len()];
    for (job, c) in jobs.iter().zip(counted) {
        over[job.desc] |= c.over;
    }
    if over.iter().any(|&o| o) {
        for (c, o) in charge.iter_mut().zip(&over) {
            if !o {
                *c = 0;
            }
        }
    }
}

/// The count Redis failed to give, under `on_error: allow` (the whole
/// limit remaining) or `deny` (over).
fn fallback(job: &Job<'_>, deny: bool, now_ns: u64) -> Counted {
    let unit = job
        .rule
        .unit
        .unwrap_or_else(|| unreachable!("a counted limit has a unit"));
    Counted {
        over: deny || job.rule.requests_per_unit == 0,
        remaining: if deny {
            0
        } else {
            u64::from(job.rule.requests_per_unit)
        },
        reset_s: unit.seconds() - now_ns / 1_000_000_000 % unit.seconds(),
        before: None,
    }
}

impl RateLimitService {
    /// A service answering from `config` (none: every call fails until one
    /// is [`set`](Self::set_config)), with `settings`, on `clock`, whose
    /// time must be nanoseconds since the Unix epoch
    /// ([`UnixClock`](super::UnixClock)).
    pub fn new(
        config: Option<RlsConfig>,
        settings: RlsSettings,
        clock: Arc<dyn Clock>,
    ) -> RateLimitService {
        let readiness = Readiness::default();
        let unconfigured = config.is_none().then(|| readiness.not_ready());
        RateLimitService {
            readiness,
            unconfigured: Mutex::new(unconfigured),
            generation: AtomicU64::new(0),
            config: RwLock::new(config.map(Arc::new)),
            counters: Counters::new(settings.max_keys),
            clock,
            settings,
            metrics: RlsMetrics::new(),
            shared: None,
        }
    }

    /// Keeps the counters in `store` (Redis) instead of memory, so that
    /// every service on the same Redis and key prefix answers as one, as
    /// envoyproxy/ratelimit's replicas do on its Redis. Call
    /// [`should_rate_limit_async`](Self::should_rate_limit_async) then.
    ///
    /// Answers are those of the in-memory counters at the store's time
    /// (Redis' `TIME`, or the store builder's clock), each request one
    /// script call; when Redis fails, the store's
    /// [`OnError`] mode decides (`local`: this service's own counters at
    /// each limit divided by the store's replicas).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use tollgate_rls::{RateLimitService, RlsConfig, RlsSettings, UnixClock};
    /// use tollgate_throttle::RedisStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RlsConfig::load("/etc/ratelimit/config".as_ref(), false)?;
    /// let store = RedisStore::builder("redis://127.0.0.1:6379").prefix("rls:").connect().await?;
    /// let service = RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(UnixClock))
    ///     .with_store(store)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the configuration has a limit the store cannot
    /// count ([`RlsConfig::check_store`]).
    pub fn with_store(mut self, store: RedisStore) -> Result<RateLimitService, ConfigError> {
        if let Some(config) = self.config() {
            config.check_store()?;
        }
        self.shared = Some(Shared::new(store));
        Ok(self)
    }

    /// The Redis store the counters live in, if any.
    pub fn store(&self) -> Option<&RedisStore> {
        self.shared.as_ref().map(Shared::store)
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &RlsMetrics {
        &self.metrics
    }

    /// Puts `config` in force for the calls that start from now. The fixed
    /// windows' counts carry over (they are keyed by domain and entries);
    /// the smooth algorithms' start afresh.
    ///
    /// With a store, a configuration it cannot count is logged and
    /// refused (see [`try_set_config`](Self::try_set_config)).
    pub fn set_config(&self, config: RlsConfig) {
        if let Err(e) = self.try_set_config(config) {
            error!(error = %e, "rate limit configuration refused");
        }
    }

    /// As [`set_config`](Self::set_config), saying why a configuration
    /// was refused.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: with a store, a limit it cannot count
    /// ([`RlsConfig::check_store`]); the configuration in force stays.
    pub fn try_set_config(&self, config: RlsConfig) -> Result<(), ConfigError> {
        if self.shared.is_some() {
            config.check_store()?;
        }
        *self.config.write_unpoisoned() = Some(Arc::new(config));
        self.unconfigured.lock_unpoisoned().take();
        // Relaxed: a count to watch; the configuration itself is published
        // by the lock above.
        self.generation.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many configurations [`set_config`](Self::set_config) (and so a
    /// reload) has put in force, the first given to
    /// [`new`](Self::new) aside.
    pub fn generation(&self) -> u64 {
        // Relaxed: as in `try_set_config`.
        self.generation.load(Ordering::Relaxed)
    }

    /// Ready once a configuration is loaded.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The configuration in force.
    pub fn config(&self) -> Option<Arc<RlsConfig>> {
        self.config.read_unpoisoned().clone()
    }

    /// The settings.
    pub fn settings(&self) -> &RlsSettings {
        &self.settings
    }

    /// Fixed-window keys held now.
    pub fn keys(&self) -> usize {
        self.counters.len()
    }

    /// Answers `request`.
    ///
    /// # Errors
    ///
    /// [`RequestError`]: an empty domain or descriptor list, no
    /// configuration loaded, a limit override with an unknown unit.
    /// A service with a store ([`with_store`](Self::with_store)) answers
    /// only [`should_rate_limit_async`](Self::should_rate_limit_async).
    ///
    /// # Errors
    ///
    /// [`RequestError`]: an empty domain or descriptor list, no
    /// configuration loaded, a limit override with an unknown unit, or a
    /// store ([`RequestError::NeedsAsync`]).
    pub fn should_rate_limit(&self, request: &Request) -> Result<Response, RequestError> {
        let answer = if self.shared.is_some() {
            Err(RequestError::NeedsAsync)
        } else {
            self.decide(request)
        };
        self.count_call(&answer);
        answer
    }

    /// Answers `request`, from the store when there is one (one Redis
    /// script call; two with `stop incrementing when over limit`), else as
    /// [`should_rate_limit`](Self::should_rate_limit).
    ///
    /// # Errors
    ///
    /// As [`should_rate_limit`](Self::should_rate_limit), never
    /// [`RequestError::NeedsAsync`]. A Redis failure is no error: the
    /// store's `on_error` mode answers.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the request counted in Redis.
    pub async fn should_rate_limit_async(
        &self,
        request: &Request,
    ) -> Result<Response, RequestError> {
        let answer = match &self.shared {
            Some(shared) => self.decide_shared(shared, request).await,
            None => self.decide(request),
        };
        self.count_call(&answer);
        answer
    }

    fn count_call(&self, answer: &Result<Response, RequestError>) {
        match answer {
            Ok(_) => self.metrics.calls.inc(),
            Err(_) => self.metrics.errors.inc(),
        }
    }

    /// Matches every descriptor of `request` in `config`.
    fn plan<'c>(
        &self,
        config: Option<&'c RlsConfig>,
        request: &Request,
    ) -> Result<Plan<'c>, RequestError> {
        if request.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        let config = config.ok_or(RequestError::NoConfig)?;
        let root = config.domains.get(&request.domain);

        // Match every descriptor.
        let mut matched = Vec::with_capacity(request.descriptors.len());
        for (index, d) in request.descriptors.iter().enumerate() {
            let Some(root) = root else {
                matched.push(Matched::None);
                continue;
            };
            if let Some((limit, unit)) = d.limit {
                let unit =
                    Unit::from_wire(unit).ok_or(RequestError::BadOverrideUnit { index, unit })?;
                let mut key = String::new();
                matching::plain_key(&request.domain, &d.entries, &mut key);
                matched.push(Matched::Override(
                    Arc::new(ConfiguredLimit::adhoc(&request.domain, limit, unit)),
                    key,
                ));
                continue;
            }
            let mut key = String::new();
            match matching::find(root, &request.domain, &d.entries, &mut key) {
                None => matched.push(Matched::None),
                Some(node) if node.rules.iter().any(|r| r.unlimited) => {
                    matched.push(Matched::Unlimited(&node.rules))
                }
                Some(node) => matched.push(Matched::Rules(&node.rules, key)),
            }
        }

        // `replaces`: the names every matched limit knocks out (unlimited
        // ones included).
        let mut replaced: HashSet<&str> = HashSet::new();
        for m in &matched {
            if let Matched::Unlimited(rules) | Matched::Rules(rules, _) = m {
                for r in *rules {
                    replaced.extend(r.replaces.iter().map(String::as_str));
                }
            }
        }
        if !replaced.is_empty() {
            for m in &mut matched {
                if let Matched::Rules(rules, _) = m {
                    if rules.iter().all(|r| is_replaced(r, &replaced)) {
                        *m = Matched::None;
                    }
                }
            }
        }

        let hits: Vec<u64> = request
            .descriptors
            .iter()
            .map(|d| {
                d.hits_addend
                    .unwrap_or(u64::from(request.hits_addend.max(1)))
            })
            .collect();
        Ok(Plan {
            matched,
            replaced,
            hits,
        })
    }

    /// Answers `request` with the counters in memory.
    fn decide(&self, request: &Request) -> Result<Response, RequestError> {
        let config = self.config();
        let plan = self.plan(config.as_deref(), request)?;
        let now_ns = self.clock.now_ns();
        let mut charge = plan.hits.clone();
        if self.settings.stop_increment_when_over_limit {
            let jobs = plan.jobs(&plan.hits);
            let counted = self.count_memory(&jobs, now_ns, Touch::Probe, 1);
            stop_increment(&jobs, &counted, &mut charge);
        }
        let jobs = plan.jobs(&charge);
        let counted = self.count_memory(&jobs, now_ns, Touch::Charge, 1);
        let (response, refunds) = self.finish(&plan, &jobs, &counted);
        for job in refunds {
            if let Some(smooth) = &job.rule.smooth {
                self.counters
                    .refund(&job.key, (smooth, &job.rule.table), now_ns, job.hits);
            }
        }
        Ok(response)
    }

    /// Answers `request` with the counters in the Redis store.
    async fn decide_shared(
        &self,
        shared: &Shared,
        request: &Request,
    ) -> Result<Response, RequestError> {
        let config = self.config();
        let plan = self.plan(config.as_deref(), request)?;
        let mut charge = plan.hits.clone();
        if self.settings.stop_increment_when_over_limit {
            let jobs = plan.jobs(&plan.hits);
            let (counted, _) = self.count_shared(shared, &plan, &jobs, Touch::Probe).await;
            stop_increment(&jobs, &counted, &mut charge);
        }
        let jobs = plan.jobs(&charge);
        let (counted, now_ns) = self.count_shared(shared, &plan, &jobs, Touch::Charge).await;
        let (response, refunds) = self.finish(&plan, &jobs, &counted);
        if !refunds.is_empty() {
            shared.refund(&refunds, now_ns).await;
        }
        Ok(response)
    }

    /// Counts `jobs` in memory, each limit divided by `replicas`.
    fn count_memory(
        &self,
        jobs: &[Job<'_>],
        now_ns: u64,
        touch: Touch,
        replicas: u32,
    ) -> Vec<Counted> {
        jobs.iter()
            .map(|job| {
                let rule = job.rule;
                let unit = rule
                    .unit
                    .unwrap_or_else(|| unreachable!("a counted limit has a unit"));
                let (limit, smooth) = if replicas > 1 {
                    let limit = (rule.requests_per_unit / replicas).max(1);
                    let smooth = rule.local_smooth(limit, unit);
                    (limit, smooth.map(|s| (s, &rule.table)))
                } else {
                    let smooth = rule.smooth.as_ref().map(|s| (s, &rule.table));
                    (rule.requests_per_unit, smooth)
                };
                let limit = if rule.requests_per_unit == 0 {
                    0
                } else {
                    limit
                };
                self.counters
                    .count(&job.key, limit, unit, smooth, now_ns, job.hits, touch)
            })
            .collect()
    }

    /// Counts `jobs` in Redis in one script call; when Redis fails, as
    /// the store's `on_error` mode says.
    async fn count_shared(
        &self,
        shared: &Shared,
        plan: &Plan<'_>,
        jobs: &[Job<'_>],
        touch: Touch,
    ) -> (Vec<Counted>, u64) {
        let now_ns = self.clock.now_ns();
        // A limit alone on its descriptor is never refunded (`finish`).
        let alone: Vec<bool> = jobs
            .iter()
            .map(|j| matches!(plan.matched[j.desc], Matched::Rules(rules, _) if rules.len() == 1))
            .collect();
        match shared.count(jobs, &alone, touch, now_ns).await {
            Ok(counted) => counted,
            Err(_) => {
                // The store's link logs Redis' error, rate-limited.
                let mode = shared.on_error();
                self.metrics
                    .store_errors
                    .with_label_values(&[match mode {
                        OnError::Allow => "allow",
                        OnError::Deny => "deny",
                        OnError::Local => "local",
                    }])
                    .inc();
                let counted = match mode {
                    OnError::Local => self.count_memory(jobs, now_ns, touch, shared.replicas()),
                    OnError::Allow | OnError::Deny => jobs
                        .iter()
                        .map(|job| fallback(job, mode == OnError::Deny, now_ns))
                        .collect(),
                };
                (counted, now_ns)
            }
        }
    }

    /// The response from the counts of `jobs`, and the smooth limits to
    /// give their hits back to (those that admitted a descriptor another
    /// of its limits refused).
    fn finish<'a>(
        &self,
        plan: &Plan<'_>,
        jobs: &[Job<'a>],
        counted: &[Counted],
    ) -> (Response, Vec<Job<'a>>) {
        let mut refunds = Vec::new();
        let mut statuses = Vec::with_capacity(plan.matched.len());
        let mut quota = Vec::with_capacity(plan.matched.len());
        let mut next = 0;
        for (index, m) in plan.matched.iter().enumerate() {
            let is_quota = self.settings.quota_mode
                || match m {
                    Matched::Rules(rules, _) => rules.iter().any(|r| r.quota_mode),
                    _ => false,
                };
            let unlimited = matches!(m, Matched::Unlimited(_));
            quota.push(is_quota && !unlimited);
            // This descriptor's jobs: the run of them with its index.
            let first = next;
            while next < jobs.len() && jobs[next].desc == index {
                next += 1;
            }
            let mine = &jobs[first..next];
            let counts = &counted[first..next];
            statuses.push(match m {
                Matched::None => DescriptorStatus::no_limit(),
                Matched::Unlimited(_) => DescriptorStatus {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    duration_until_reset: None,
                },
                _ => {
                    let mut best: Option<(Counted, &ConfiguredLimit)> = None;
                    for (job, &c) in mine.iter().zip(counts) {
                        self.record(job.rule, c, job.hits);
                        let closer = match &best {
                            None => true,
                            Some((b, _)) => {
                                (c.over && !b.over)
                                    || (c.over == b.over && !b.over && c.remaining < b.remaining)
                            }
                        };
                        if closer {
                            best = Some((c, job.rule));
                        }
                    }
                    let (b, rule) = best.unwrap_or_else(|| unreachable!("a matched limit counts"));
                    if b.over && mine.len() > 1 {
                        for (job, c) in mine.iter().zip(counts) {
                            if !c.over && job.rule.smooth.is_some() {
                                refunds.push(job.clone());
                            }
                        }
                    }
                    status(rule, b)
                }
            });
        }

        // The overall code.
        let mut failed = 0;
        let mut quota_total = 0;
        let mut quota_failed = 0;
        for (s, &q) in statuses.iter().zip(&quota) {
            if q {
                quota_total += 1;
            }
            if s.code == Code::OverLimit {
                if q {
                    quota_failed += 1;
                } else {
                    failed += 1;
                }
            }
        }
        let mut overall_code = if failed > 0 || (quota_total > 0 && quota_total == quota_failed) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        if self.settings.shadow_mode {
            overall_code = Code::Ok;
        }
        let response_headers = if self.settings.response_headers {
            self.headers(&statuses, &quota)
        } else {
            Vec::new()
        };
        let response = Response {
            overall_code,
            statuses,
            response_headers,
        };
        (response, refunds)
    }

    /// Counts `hits` of `rule` in its metrics, splitting them as the
    /// reference does when the count before them is known: of a call that
    /// crosses the limit, only the hits past it are over the limit (and in
    /// shadow mode), and those between the near-limit threshold and the
    /// limit are near it; of an admitted call that crosses the threshold,
    /// only the hits past it are near. Where the count before is not known
    /// (the smooth algorithms), every hit of the call counts alike.
    fn record(&self, rule: &ConfiguredLimit, counted: Counted, hits: u64) {
        let stats = rule.stats.get_or_init(|| self.metrics.rule(&rule.path));
        stats.total_hits.inc_by(hits);
        let limit = u64::from(rule.requests_per_unit);
        let near = near_threshold(limit, self.settings.near_limit_ratio);
        if counted.over {
            let (over, near_hits) = match counted.before {
                Some(before) if before < limit => (
                    (before + hits).saturating_sub(limit),
                    limit.saturating_sub(near.max(before)),
                ),
                _ => (hits, 0),
            };
            stats.over_limit.inc_by(over);
            stats.near_limit.inc_by(near_hits);
            if rule.shadow_mode {
                stats.shadow_mode.inc_by(over);
            }
        } else {
            stats.within_limit.inc_by(hits);
            let after = limit - counted.remaining.min(limit);
            if after > near {
                stats.near_limit.inc_by(match counted.before {
                    Some(before) if before < near => after - near,
                    _ => hits,
                });
            }
        }
    }

    /// The reference's headers: from the status with the least remaining
    /// (the first on ties), or the last over its limit that is not a quota
    /// descriptor.
    fn headers(&self, statuses: &[DescriptorStatus], quota: &[bool]) -> Vec<(String, String)> {
        let mut chosen: Option<&DescriptorStatus> = None;
        let mut least = u32::MAX;
        for (s, &q) in statuses.iter().zip(quota) {
            if s.current_limit.is_some() && s.limit_remaining < least {
                chosen = Some(s);
                least = s.limit_remaining;
            }
            if s.code == Code::OverLimit && !q {
                chosen = Some(s);
                least = 0;
            }
        }
        let Some(s) = chosen else {
            return Vec::new();
        };
        let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
        let reset = s.duration_until_reset.map_or(0, |d| d.as_secs());
        vec![
            (self.settings.limit_header.clone(), limit.to_string()),
            (
                self.settings.remaining_header.clone(),
                s.limit_remaining.to_string(),
            ),
            (self.settings.reset_header.clone(), reset.to_string()),
        ]
    }
}

/// The count past which a hit is near the limit: `limit × ratio` rounded
/// down, computed in single precision as the reference computes it (so a
/// limit above 2^24 rounds as it does there).
fn near_threshold(limit: u64, ratio: f64) -> u64 {
    ((limit as f32) * (ratio as f32)).floor() as u64
}

/// Whether `rule` is one of the limits a request's `replaces` knock out.
fn is_replaced(rule: &ConfiguredLimit, replaced: &HashSet<&str>) -> bool {
    !replaced.is_empty() && !rule.name.is_empty() && replaced.contains(rule.name.as_str())
}

/// A counted limit's status; a shadow rule over its limit answers OK.
fn status(rule: &ConfiguredLimit, counted: Counted) -> DescriptorStatus {
    let code = if counted.over && !rule.shadow_mode {
        Code::OverLimit
    } else {
        Code::Ok
    };
    DescriptorStatus {
        code,
        current_limit: rule.unit.map(|unit| CurrentLimit {
            name: rule.name.clone(),
            requests_per_unit: rule.requests_per_unit,
            unit,
        }),
        limit_remaining: u32::try_from(counted.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(Duration::from_secs(counted.reset_s)),
    }
}
