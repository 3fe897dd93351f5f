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

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tollgate::Clock;
use tollgate_service::RwLockUnpoisoned;

use super::config::{ConfiguredLimit, RlsConfig};
use super::counter::{Counted, Counters, Touch};
use super::matching;
use super::metrics::RlsMetrics;
use super::Unit;

/// A `ShouldRateLimit` request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The configuration domain.
    pub domain: String,
    /// The descriptors, each answered with one status in order.
    pub descriptors: Vec<Descriptor>,
    /// Hits each descriptor without its own `hits_addend` adds; 0 means 1.
    pub hits_addend: u32,
}

/// One request descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Its entries, `(key, value)`, in order.
    pub entries: Vec<(String, String)>,
    /// A limit that replaces the configuration's for it:
    /// `(requests_per_unit, unit)`, the unit as its wire number (0 is
    /// refused).
    pub limit: Option<(u32, i32)>,
    /// Hits it adds, when set (0: check only).
    pub hits_addend: Option<u64>,
}

impl Descriptor {
    /// A descriptor of `entries`, with no override and the request's hits.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Descriptor {
        Descriptor {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            limit: None,
            hits_addend: None,
        }
    }
}

/// A status's or a response's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Not limited.
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit a status was decided by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's name (empty when unnamed, and for overrides).
    pub name: String,
    /// Its limit.
    pub requests_per_unit: u32,
    /// Its window.
    pub unit: Unit,
}

/// The answer for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// Its verdict.
    pub code: Code,
    /// The limit that decided it; `None` when no limit applies.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left in the window (0 when over, or with no limit;
    /// `u32::MAX` when unlimited).
    pub limit_remaining: u32,
    /// Until the window resets; `None` when no limit applies.
    pub duration_until_reset: Option<Duration>,
}

impl DescriptorStatus {
    fn no_limit() -> DescriptorStatus {
        DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
        }
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// OVER_LIMIT when Envoy should refuse the request.
    pub overall_code: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Headers for the downstream response (with
    /// [`RlsSettings::response_headers`]).
    pub response_headers: Vec<(String, String)>,
}

/// Why a request was refused with a gRPC error rather than answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The request names no domain.
    EmptyDomain,
    /// The request has no descriptors.
    NoDescriptors,
    /// No configuration has been loaded.
    NoConfig,
    /// Descriptor `index` overrides the limit with unit UNKNOWN or one
    /// past the enum.
    BadOverrideUnit {
        /// The descriptor's index.
        index: usize,
        /// The unit's wire number.
        unit: i32,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            RequestError::NoDescriptors => {
                f.write_str("rate limit descriptor list must not be empty")
            }
            RequestError::NoConfig => f.write_str("no rate limit configuration loaded"),
            RequestError::BadOverrideUnit { index, unit } => write!(
                f,
                "descriptor {index}: the limit override's unit {unit} is not one of SECOND (1) to WEEK (7)"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// The reference's settings that change answers.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsSettings {
    /// Send `RateLimit-Limit`, `-Remaining` and `-Reset` headers
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
    /// The limit header's name (`LIMIT_LIMIT_HEADER`).
    pub limit_header: String,
    /// The remaining header's name (`LIMIT_REMAINING_HEADER`).
    pub remaining_header: String,
    /// The reset header's name (`LIMIT_RESET_HEADER`).
    pub reset_header: String,
    /// Answer OK overall whatever the statuses say (`SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Every descriptor is a quota descriptor (`QUOTA_MODE`).
    pub quota_mode: bool,
    /// When any descriptor of a request would go over, charge only those
    /// that go over (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// The share of a limit past which a hit counts as near the limit, for
    /// the `near_limit` metric (`NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f64,
    /// Most keys each counter table holds (the least recently used go
    /// first past it).
    pub max_keys: usize,
}

impl Default for RlsSettings {
    fn default() -> RlsSettings {
        RlsSettings {
            response_headers: false,
            limit_header: "RateLimit-Limit".to_owned(),
            remaining_header: "RateLimit-Remaining".to_owned(),
            reset_header: "RateLimit-Reset".to_owned(),
            shadow_mode: false,
            quota_mode: false,
            stop_increment_when_over_limit: false,
            near_limit_ratio: 0.8,
            max_keys: RlsSettings::DEFAULT_MAX_KEYS,
        }
    }
}

impl RlsSettings {
    /// The default of [`max_keys`](Self::max_keys).
    pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
}

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
        RateLimitService {
            config: RwLock::new(config.map(Arc::new)),
            counters: Counters::new(settings.max_keys),
            clock,
            settings,
            metrics: RlsMetrics::new(),
        }
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &RlsMetrics {
        &self.metrics
    }

    /// Puts `config` in force for the calls that start from now. The fixed
    /// windows' counts carry over (they are keyed by domain and entries);
    /// the smooth algorithms' start afresh.
    pub fn set_config(&self, config: RlsConfig) {
        *self.config.write_unpoisoned() = Some(Arc::new(config));
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
    pub fn should_rate_limit(&self, request: &Request) -> Result<Response, RequestError> {
        let answer = self.decide(request);
        match answer {
            Ok(_) => self.metrics.calls.inc(),
            Err(_) => self.metrics.errors.inc(),
        }
        answer
    }

    fn decide(&self, request: &Request) -> Result<Response, RequestError> {
        if request.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        let config = self.config().ok_or(RequestError::NoConfig)?;
        let now_ns = self.clock.now_ns();
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

        // With stop-increment: does any limit go over?
        let mut charge: Vec<u64> = hits.clone();
        if self.settings.stop_increment_when_over_limit {
            let over: Vec<bool> = matched
                .iter()
                .zip(&hits)
                .map(|(m, &h)| {
                    self.count_all(m, &replaced, now_ns, h, Touch::Probe)
                        .is_some_and(|(c, _)| c.over)
                })
                .collect();
            if over.iter().any(|&o| o) {
                for (c, o) in charge.iter_mut().zip(&over) {
                    if !o {
                        *c = 0;
                    }
                }
            }
        }

        let mut statuses = Vec::with_capacity(matched.len());
        let mut quota = Vec::with_capacity(matched.len());
        for (m, &h) in matched.iter().zip(&charge) {
            let is_quota = self.settings.quota_mode
                || match m {
                    Matched::Rules(rules, _) => rules.iter().any(|r| r.quota_mode),
                    _ => false,
                };
            let unlimited = matches!(m, Matched::Unlimited(_));
            quota.push(is_quota && !unlimited);
            statuses.push(match m {
                Matched::None => DescriptorStatus::no_limit(),
                Matched::Unlimited(_) => DescriptorStatus {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    duration_until_reset: None,
                },
                _ => {
                    let (counted, rule) = self
                        .count_all(m, &replaced, now_ns, h, Touch::Charge)
                        .unwrap_or_else(|| unreachable!("a matched limit counts"));
                    status(rule, counted)
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
        Ok(Response {
            overall_code,
            statuses,
            response_headers,
        })
    }

    /// Counts every limit of `m`; the one closest to its limit, with its
    /// rule. `None` when `m` has nothing to count.
    fn count_all<'a>(
        &self,
        m: &'a Matched<'a>,
        replaced: &HashSet<&str>,
        now_ns: u64,
        hits: u64,
        touch: Touch,
    ) -> Option<(Counted, &'a ConfiguredLimit)> {
        let (rules, key): (&[Arc<ConfiguredLimit>], &str) = match m {
            Matched::Rules(rules, key) => (rules, key),
            Matched::Override(rule, key) => (std::slice::from_ref(rule), key),
            Matched::None | Matched::Unlimited(_) => return None,
        };
        let several = rules.len() > 1;
        let mut best: Option<(Counted, &ConfiguredLimit)> = None;
        let mut slot_key = String::new();
        // Smooth limits that admitted the hits, to give them back if
        // another limit of the descriptor refuses.
        let mut admitted: Vec<(&ConfiguredLimit, String)> = Vec::new();
        for rule in rules {
            if is_replaced(rule, replaced) {
                continue;
            }
            let unit = rule.unit?;
            let key = if rule.slot == 0 {
                key
            } else {
                slot_key.clear();
                slot_key.push_str(key);
                slot_key.push('#');
                slot_key.push_str(&rule.slot.to_string());
                &slot_key
            };
            let smooth = rule.smooth.as_ref().map(|s| (s, &rule.table));
            let counted = self.counters.count(
                key,
                rule.requests_per_unit,
                unit,
                smooth,
                now_ns,
                hits,
                touch,
            );
            if touch == Touch::Charge {
                self.record(rule, counted, hits);
                if several && !counted.over && rule.smooth.is_some() {
                    admitted.push((rule, key.to_owned()));
                }
            }
            let closer = match &best {
                None => true,
                Some((b, _)) => {
                    (counted.over && !b.over)
                        || (counted.over == b.over && !b.over && counted.remaining < b.remaining)
                }
            };
            if closer {
                best = Some((counted, rule));
            }
        }
        if best.is_some_and(|(b, _)| b.over) {
            for (rule, key) in admitted {
                if let Some(smooth) = &rule.smooth {
                    self.counters
                        .refund(&key, (smooth, &rule.table), now_ns, hits);
                }
            }
        }
        best
    }

    /// Counts `hits` of `rule` in its metrics.
    fn record(&self, rule: &ConfiguredLimit, counted: Counted, hits: u64) {
        let stats = rule.stats.get_or_init(|| self.metrics.rule(&rule.path));
        stats.total_hits.inc_by(hits);
        if counted.over {
            stats.over_limit.inc_by(hits);
            if rule.shadow_mode {
                stats.shadow_mode.inc_by(hits);
            }
        } else {
            stats.within_limit.inc_by(hits);
            let limit = u64::from(rule.requests_per_unit);
            let near = (limit as f64 * self.settings.near_limit_ratio).floor() as u64;
            if limit - counted.remaining.min(limit) > near {
                stats.near_limit.inc_by(hits);
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
