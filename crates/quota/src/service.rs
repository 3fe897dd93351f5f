//! The Allow operation: validate a request, find its bucket, reserve its
//! tokens and say how long to wait, counting every outcome.
//!
//! # Implementation notes
//!
//! The answers are the reference quotaservice's, call for call, except
//! where it is plainly broken (see the README's table of differences).
//!
//! The order of checks fixes which status a bad request gets: names
//! (`REJECTED_INVALID_REQUEST` for an empty one, or one over
//! [`MAX_NAME_LEN`](super::names::MAX_NAME_LEN) bytes) and a negative token
//! count (likewise: the reference would echo it as granted), then the
//! bucket lookup (`REJECTED_NO_BUCKET`), the dynamic caps for a dynamic
//! bucket not yet created (`REJECTED_TOO_MANY_BUCKETS`), the token count
//! against the bucket's `max_tokens_per_request`
//! (`REJECTED_TOO_MANY_TOKENS_REQUESTED`, checked before the dynamic
//! bucket is created, so that a refused request never costs a dynamic
//! bucket slot; the reference creates it first) and finally the reservation
//! (`REJECTED_TIMEOUT` when the debt owed before the request exceeds the
//! max wait, or the debt it would leave exceeds the max debt).
//!
//! As in the reference: 0 tokens (proto3's default for an unset field)
//! reserve one token and are answered `tokens_granted: 0`; a max wait
//! override counts only with `max_wait_time_override` set, only when lower
//! than the bucket's `wait_timeout_millis`, and a negative one means no
//! wait at all; waits are reported in whole milliseconds rounded *down*,
//! the time already being accounted for by the bucket.

use std::sync::Arc;
use std::time::Duration;

use super::config::QuotaConfig;
use super::metrics::{QuotaMetrics, UNKNOWN_NAMESPACE};
use super::names::check_name;
use super::registry::{resolve, BucketKind, QuotaLimits, Registry};
use super::status::Status;
use super::store::{Connected, OnError, QuotaStore, Reservation, Reserved};
use tollgate::Clock;
use tollgate::Refusal;
use tollgate_service::Readiness;

/// One Allow request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowRequest<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The bucket's name in the namespace.
    pub bucket: &'a str,
    /// Tokens wanted; 0 reserves 1 (and is answered as 0 granted), as in
    /// the reference.
    pub tokens: i64,
    /// A max wait in milliseconds that replaces the bucket's if lower; a
    /// negative one means no wait at all (the reference's answer).
    pub max_wait_millis: Option<i64>,
}

impl<'a> AllowRequest<'a> {
    /// A request for `tokens` tokens from `namespace:bucket`, with the
    /// bucket's max wait.
    pub fn new(namespace: &'a str, bucket: &'a str, tokens: i64) -> AllowRequest<'a> {
        AllowRequest {
            namespace,
            bucket,
            tokens,
            max_wait_millis: None,
        }
    }

    /// The same request with a max wait override, in milliseconds.
    #[must_use]
    pub fn max_wait_millis(self, millis: i64) -> AllowRequest<'a> {
        AllowRequest {
            max_wait_millis: Some(millis),
            ..self
        }
    }
}

/// The answer to an Allow request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The outcome.
    pub status: Status,
    /// Tokens granted: the tokens requested if `status` is `Ok` (0 when 0
    /// were requested, though one was reserved), else 0.
    pub tokens_granted: i64,
    /// How long to wait before using them (exact): the debt owed before
    /// the request.
    pub wait: Duration,
}

impl Decision {
    fn rejected(status: Status) -> Decision {
        Decision {
            status,
            tokens_granted: 0,
            wait: Duration::ZERO,
        }
    }

    /// The wait in whole milliseconds, rounded down as the reference does.
    pub fn wait_millis(&self) -> i64 {
        i64::try_from(self.wait.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The quota service: buckets, their configuration and their metrics.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_quota::QuotaConfig;
/// use tollgate_quota::{QuotaLimits, Quota, AllowRequest, Status};
/// use tollgate::ManualClock;
///
/// let config = QuotaConfig::from_yaml(
///     "namespaces:\n  Pinky_TheBrain:\n    buckets:\n      UserService: {size: 1, fill_rate: 10}\n",
/// )?;
/// let clock = ManualClock::new();
/// let quota = Quota::new(config, QuotaLimits::default(), Arc::new(clock.clone()));
///
/// let first = quota.allow(&AllowRequest::new("Pinky_TheBrain", "UserService", 1));
/// assert_eq!((first.status, first.wait_millis()), (Status::Ok, 0));
/// // Nothing on hand: granted, and the token it borrows is the next
/// // caller's wait.
/// let second = quota.allow(&AllowRequest::new("Pinky_TheBrain", "UserService", 1));
/// assert_eq!((second.status, second.wait_millis()), (Status::Ok, 0));
/// let third = quota.allow(&AllowRequest::new("Pinky_TheBrain", "UserService", 1));
/// assert_eq!((third.status, third.wait_millis()), (Status::Ok, 100));
/// let other = quota.allow(&AllowRequest::new("Pinky_TheBrain", "Other", 1));
/// assert_eq!(other.status, Status::RejectedNoBucket);
/// # Ok::<(), tollgate_quota::QuotaConfigError>(())
/// ```
#[derive(Debug)]
pub struct Quota {
    registry: Registry,
    metrics: QuotaMetrics,
    clock: Arc<dyn Clock>,
    /// What the debug port's `/healthz` follows.
    readiness: Readiness,
    /// The buckets in Redis, if kept there.
    store: Option<Connected>,
}

impl Quota {
    /// A service for `config` on `clock`.
    pub fn new(config: QuotaConfig, limits: QuotaLimits, clock: Arc<dyn Clock>) -> Quota {
        let metrics = QuotaMetrics::new();
        Quota {
            registry: Registry::new(config, limits, Arc::clone(&clock), metrics.clone()),
            metrics,
            clock,
            readiness: Readiness::default(),
            store: None,
        }
    }

    /// A service for `config` whose buckets are kept in Redis as `store`
    /// says, shared by every server with the same Redis and key prefix:
    /// answer with [`allow_async`](Quota::allow_async). Connects now,
    /// within the store's connect timeout.
    ///
    /// This server's own buckets remain, at `fill_rate / replicas`, for
    /// [`OnError::Local`] and for [`allow`](Quota::allow).
    ///
    /// # Errors
    ///
    /// A key prefix with a brace, or a Redis that cannot be reached (or
    /// does not answer `PING`) in time: one line naming it and why.
    pub async fn with_store(
        config: QuotaConfig,
        limits: QuotaLimits,
        clock: Arc<dyn Clock>,
        store: QuotaStore,
    ) -> Result<Quota, tollgate_service::redis_link::StoreError> {
        let store = store.connect().await?;
        let mut quota = Quota::new(config, limits, clock);
        quota.registry.divide_rates(store.replicas());
        quota.store = Some(store);
        Ok(quota)
    }

    /// Whether the buckets are kept in Redis.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Answers one Allow request as [`allow`](Quota::allow) does, from the
    /// buckets in Redis when the service has a store: one script call, or
    /// a place in one shared with the Allows that arrive while the store's
    /// calls are in flight (the same answer), at most the store's
    /// deadline. When Redis fails, the store's
    /// [`OnError`] answers, and `tollgate_quota_store_errors_total` counts
    /// it. Without a store, the same as [`allow`](Quota::allow).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the tokens reserved in Redis.
    pub async fn allow_async(&self, req: &AllowRequest<'_>) -> Decision {
        let Some(store) = &self.store else {
            return self.allow(req);
        };
        let start = self.clock.now_ns();
        let decision = self.decide_shared(store, req).await;
        let took = self.clock.now_ns().saturating_sub(start);
        self.metrics.answered(decision.status, took);
        decision
    }

    /// The answer to one Allow request from the buckets in Redis, checked
    /// in the order of [`decide`](Quota::decide).
    async fn decide_shared(&self, store: &Connected, req: &AllowRequest<'_>) -> Decision {
        if check_name(req.namespace).is_err() || check_name(req.bucket).is_err() || req.tokens < 0 {
            self.metrics.invalid.inc();
            return Decision::rejected(Status::RejectedInvalidRequest);
        }
        let tokens = req.tokens.max(1).unsigned_abs();
        // A snapshot: no lock is held across the call to Redis.
        let config = self.registry.config();
        let Some((kind, ns, name, bucket)) = resolve(&config, req.namespace, req.bucket) else {
            let label = if config.namespaces.contains_key(req.namespace) {
                req.namespace
            } else {
                UNKNOWN_NAMESPACE
            };
            self.metrics
                .misses
                .with_label_values(&[label, "no_bucket"])
                .inc();
            return Decision::rejected(Status::RejectedNoBucket);
        };
        let too_many_tokens =
            tokens > bucket.max_tokens_per_request || tokens > tollgate::TokenBucket::MAX_OPS;
        if kind == BucketKind::Dynamic && !self.has_local_room(kind, ns, name, too_many_tokens) {
            self.metrics
                .misses
                .with_label_values(&[ns, "too_many_buckets"])
                .inc();
            return Decision::rejected(Status::RejectedTooManyBuckets);
        }
        let dynamic_cap = config
            .namespaces
            .get(ns)
            .map(|n| n.max_dynamic_buckets)
            .filter(|&cap| kind == BucketKind::Dynamic && cap > 0);
        if too_many_tokens && dynamic_cap.is_none() {
            self.metrics.too_many_tokens.with_label_values(&[ns]).inc();
            return Decision::rejected(Status::RejectedTooManyTokensRequested);
        }
        let settings = bucket.settings();
        let max_wait = match req.max_wait_millis {
            Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(0))
                .min(settings.max_wait_duration()),
            None => settings.max_wait_duration(),
        };
        let reservation = Reservation {
            namespace: ns,
            name,
            ops: (!too_many_tokens).then_some(tokens),
            settings,
            max_wait,
            dynamic_cap,
            max_idle: bucket.max_idle,
        };
        match store.reserve(&reservation).await {
            Ok(Reserved::Granted(wait)) => {
                let waited = if wait.is_zero() { "false" } else { "true" };
                self.metrics.served.with_label_values(&[ns, waited]).inc();
                self.metrics
                    .tokens_served
                    .with_label_values(&[ns])
                    .inc_by(tokens as f64);
                Decision {
                    status: Status::Ok,
                    tokens_granted: req.tokens,
                    wait,
                }
            }
            Ok(Reserved::Refused) => {
                self.metrics.timeouts.with_label_values(&[ns]).inc();
                Decision::rejected(Status::RejectedTimeout)
            }
            Ok(Reserved::TooManyBuckets) => {
                self.metrics
                    .misses
                    .with_label_values(&[ns, "too_many_buckets"])
                    .inc();
                Decision::rejected(Status::RejectedTooManyBuckets)
            }
            Ok(Reserved::TooManyTokens) => {
                self.metrics.too_many_tokens.with_label_values(&[ns]).inc();
                Decision::rejected(Status::RejectedTooManyTokensRequested)
            }
            Err(_) => {
                // The link logs the error, at most once per 10 s.
                let mode = store.on_error();
                self.metrics.store_error(mode);
                match mode {
                    OnError::Allow => Decision {
                        status: Status::Ok,
                        tokens_granted: req.tokens,
                        wait: Duration::ZERO,
                    },
                    OnError::Deny => Decision::rejected(Status::RejectedServerError),
                    OnError::Local => self.decide(req),
                }
            }
        }
    }

    /// Whether this server has room for the dynamic bucket `name` of
    /// `namespace` under the server-wide cap (and the namespace's own):
    /// with a store, the server keeps its own bucket of each dynamic name
    /// it answers (the one [`OnError::Local`] decides on), so
    /// [`crate::QuotaLimits::max_dynamic_buckets`] counts those, per server, as
    /// in memory. A request asking too many tokens creates none.
    fn has_local_room(&self, kind: BucketKind, ns: &str, name: &str, too_many: bool) -> bool {
        let config = self.registry.config_locked();
        let Some((_, _, _, bucket)) = resolve(&config, ns, name) else {
            return true;
        };
        if too_many {
            self.registry.has_room(&config, kind, ns, name).is_ok()
        } else {
            self.registry
                .get_or_create(&config, kind, ns, name, bucket)
                .is_ok()
        }
    }

    /// Answers one Allow request, counting it by status and timing it on
    /// the service's clock. Never panics on any input. With a store
    /// ([`Quota::with_store`]) this decides on the server's own buckets,
    /// as [`OnError::Local`] does: use [`allow_async`](Quota::allow_async).
    pub fn allow(&self, req: &AllowRequest<'_>) -> Decision {
        let start = self.clock.now_ns();
        let decision = self.decide(req);
        let took = self.clock.now_ns().saturating_sub(start);
        self.metrics.answered(decision.status, took);
        decision
    }

    /// The answer to one Allow request.
    fn decide(&self, req: &AllowRequest<'_>) -> Decision {
        if check_name(req.namespace).is_err() || check_name(req.bucket).is_err() || req.tokens < 0 {
            self.metrics.invalid.inc();
            return Decision::rejected(Status::RejectedInvalidRequest);
        }
        let tokens = req.tokens.max(1);
        let config = self.registry.config_locked();
        let Some((kind, ns, name, bucket)) = resolve(&config, req.namespace, req.bucket) else {
            let label = if config.namespaces.contains_key(req.namespace) {
                req.namespace
            } else {
                UNKNOWN_NAMESPACE
            };
            self.metrics
                .misses
                .with_label_values(&[label, "no_bucket"])
                .inc();
            return Decision::rejected(Status::RejectedNoBucket);
        };
        // tokens > 0 here. The bucket is looked up first, so a new dynamic
        // bucket past its cap is refused as such whatever it asks; but a
        // request refused for its tokens creates no bucket.
        let too_many_tokens = tokens.unsigned_abs() > bucket.max_tokens_per_request;
        let found = if too_many_tokens {
            self.registry
                .has_room(&config, kind, ns, name)
                .map(|()| None)
        } else {
            self.registry
                .get_or_create(&config, kind, ns, name, bucket)
                .map(Some)
        };
        let slot = match found {
            Ok(Some(slot)) => slot,
            Ok(None) => {
                self.metrics.too_many_tokens.with_label_values(&[ns]).inc();
                return Decision::rejected(Status::RejectedTooManyTokensRequested);
            }
            Err(_) => {
                self.metrics
                    .misses
                    .with_label_values(&[ns, "too_many_buckets"])
                    .inc();
                return Decision::rejected(Status::RejectedTooManyBuckets);
            }
        };
        let ops = tokens.unsigned_abs();
        slot.record_demand(ops);
        let reserved = match req.max_wait_millis {
            Some(ms) => slot
                .bucket()
                .reserve_within(ops, Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            None => slot.bucket().reserve(ops),
        };
        match reserved {
            Ok(wait) => {
                let c = &slot.counters;
                if wait.is_zero() {
                    c.served_now.inc();
                } else {
                    c.served_after_wait.inc();
                }
                c.tokens.inc_by(ops as f64);
                Decision {
                    status: Status::Ok,
                    tokens_granted: req.tokens,
                    wait,
                }
            }
            Err(e) => {
                if e.refusal() == Refusal::TooLarge {
                    self.metrics.too_many_tokens.with_label_values(&[ns]).inc();
                    return Decision::rejected(Status::RejectedTooManyTokensRequested);
                }
                slot.counters.timeouts.inc();
                Decision::rejected(Status::RejectedTimeout)
            }
        }
    }

    /// Replaces the configuration, keeping the state of every bucket that
    /// still exists in it; returns how many buckets were dropped.
    pub fn reload(&self, config: QuotaConfig) -> usize {
        let connected = self.store.as_ref().map(Connected::settings);
        if config.store().is_some() && config.store() != connected {
            tracing::warn!(
                "the configuration's store section changed: it is read at start only, \
                 the buckets stay where they are until a restart"
            );
        }
        self.registry.reload(config)
    }

    /// Removes idle buckets; returns how many.
    pub fn reap(&self) -> usize {
        self.registry.reap()
    }

    /// The live buckets.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The service's counters.
    pub fn metrics(&self) -> &QuotaMetrics {
        &self.metrics
    }

    /// Whether the server can do its work now: the debug port's `/healthz`
    /// answers 503 while an outage recorded here
    /// ([`Readiness::not_ready`], an etcd [`Outage`](tollgate_service::Outage))
    /// lasts, and `ok` otherwise.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }
}
