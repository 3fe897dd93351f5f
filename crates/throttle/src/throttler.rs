//! [`Throttler`]: applies the rules to a request, then the admission
//! queue, and hands back a [`Permit`] or a [`Rejection`].
//!
//! # Implementation notes
//!
//! A decision reads the cost (fixed, from a header, or predicted for the
//! request's class) and the criticality, then walks the rules in order.
//! For each rule that yields a key, the hard limit decides first (through
//! the key's ban, if the rule bans); if it admits, the soft limit is
//! checked and a warning recorded when it would reject. The first enforced
//! rejection refunds what the earlier rules charged, so a rejected request
//! costs nothing. Shadow rules decide and count but never reject.
//!
//! A request the rules admit after a delay (a GCRA queue) waits that
//! delay, then enters the admission queue if one is configured: it passes
//! at once when the queue is idle, otherwise waits for a driver task that
//! releases requests at the queue's cost rate. An evicted or refused
//! request is refunded too.
//!
//! The permit's `finish` does post-accounting: with predicted costs it
//! records the measured cost for the class and charges (or refunds) the
//! difference to every key the request was charged to, and, when the
//! request passed the admission queue, to the queue's schedule as well
//! (see the queue's notes).

use std::error::Error;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use super::cost::CostPredictor;
use super::metrics::{State, ThrottleMetrics};
use super::policy::{Standing, Verdict};
use super::queue::{AdmissionQueue, Criticality, Offer};
use super::rules::{Extract, LiveRule, Mode, RequestHead, Rule};
use super::trust::Trust;
use tollgate::{Clock, RateSpec, SystemClock};
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

/// How much a request costs, in the units the rules' limits count.
#[derive(Debug, Clone)]
pub enum CostModel {
    /// Every request costs the same.
    Fixed(u64),
    /// The cost is a header's integer value (or `default`).
    Header {
        /// The header (or gRPC metadata) name.
        name: String,
        /// The cost when the header is absent or not an integer.
        default: u64,
    },
    /// Predicted from recent requests of the same class, measured when
    /// they finish ([`Permit::finish`]); the difference is charged after.
    Predicted {
        /// The class of a request (e.g. [`Extract::method_and_path`]).
        class: Extract,
        /// The cost of a class not seen yet.
        default: u64,
    },
}

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    /// Over a rule's hard limit.
    Limited,
    /// The key is banned.
    Banned,
    /// The admission queue is full.
    QueueFull,
    /// Evicted from the admission queue by a CRITICAL request.
    Evicted,
    /// The request's cost exceeds what a rule or the admission queue ever
    /// admits: no retry of it can succeed.
    CostTooHigh,
    /// The request has no usable key for a rule that rejects such requests
    /// ([`MissingKey::Reject`](super::MissingKey::Reject)).
    NoKey,
}

/// A rejected request.
///
/// Per-key limits and bans map to HTTP 429 / gRPC `RESOURCE_EXHAUSTED`
/// (the client is over its quota); a full queue and an eviction map to
/// HTTP 503 / gRPC `UNAVAILABLE` (the server shed load; retrying elsewhere
/// or later is right). Each of those says when a retry may succeed. A cost
/// no rule or queue can ever admit maps to HTTP 413 / gRPC
/// `INVALID_ARGUMENT`, and a request without a key a rule requires to
/// HTTP 400 / gRPC `INVALID_ARGUMENT`; neither has a retry time: retrying
/// it unchanged never succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    kind: RejectionKind,
    rule: Option<Arc<str>>,
    retry_after: Option<Duration>,
    /// The request's cost and, for [`RejectionKind::CostTooHigh`], the most
    /// the rule or queue ever admits.
    cost: u64,
    most: u64,
    limits: Vec<LimitStatus>,
}

impl Rejection {
    /// Why it was rejected.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The rule that rejected it, for limits and bans.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// When a retry may be admitted: always known for the kinds that map
    /// to 429 and 503; `None` for [`RejectionKind::CostTooHigh`] and
    /// [`RejectionKind::NoKey`] (never).
    /// With a clock that moves in steps of more than a nanosecond, it
    /// includes one step, for the clock to reach the time the limit names.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The HTTP status: 429, 503, 413 or 400.
    pub fn http_status(&self) -> axum::http::StatusCode {
        match self.kind {
            RejectionKind::Limited | RejectionKind::Banned => {
                axum::http::StatusCode::TOO_MANY_REQUESTS
            }
            RejectionKind::QueueFull | RejectionKind::Evicted => {
                axum::http::StatusCode::SERVICE_UNAVAILABLE
            }
            RejectionKind::CostTooHigh => axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            RejectionKind::NoKey => axum::http::StatusCode::BAD_REQUEST,
        }
    }

    /// The gRPC status code: `RESOURCE_EXHAUSTED`, `UNAVAILABLE` or
    /// `INVALID_ARGUMENT`.
    pub fn grpc_code(&self) -> tonic::Code {
        match self.kind {
            RejectionKind::Limited | RejectionKind::Banned => tonic::Code::ResourceExhausted,
            RejectionKind::QueueFull | RejectionKind::Evicted => tonic::Code::Unavailable,
            RejectionKind::CostTooHigh | RejectionKind::NoKey => tonic::Code::InvalidArgument,
        }
    }

    /// The quotas and standings of the rules that decided the request,
    /// for those with headers on ([`Rule::ratelimit_headers`]). A rule
    /// that admitted the request before another refused it stands as
    /// after the refund: the refused request costs it nothing.
    pub fn limits(&self) -> &[LimitStatus] {
        &self.limits
    }

    fn new(kind: RejectionKind, rule: Option<Arc<str>>, retry_after: Option<Duration>) -> Self {
        Rejection {
            kind,
            rule,
            retry_after,
            cost: 0,
            most: 0,
            limits: Vec::new(),
        }
    }

    fn too_costly(rule: Option<Arc<str>>, cost: u64, most: u64) -> Rejection {
        Rejection {
            cost,
            most,
            ..Rejection::new(RejectionKind::CostTooHigh, rule, None)
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = self.rule.as_deref().unwrap_or("");
        match self.kind {
            RejectionKind::Limited => write!(f, "rate limited by rule \"{rule}\""),
            RejectionKind::Banned => write!(f, "banned by rule \"{rule}\""),
            RejectionKind::QueueFull => f.write_str("admission queue full"),
            RejectionKind::Evicted => {
                f.write_str("evicted from the admission queue by a critical request")
            }
            RejectionKind::NoKey => write!(f, "no key for rule \"{rule}\""),
            RejectionKind::CostTooHigh => match &self.rule {
                Some(rule) => write!(
                    f,
                    "cost {} exceeds the most rule \"{rule}\" ever admits ({})",
                    self.cost, self.most
                ),
                None => write!(
                    f,
                    "cost {} exceeds the admission queue's capacity ({})",
                    self.cost, self.most
                ),
            },
        }
    }
}

impl Error for Rejection {}

/// One rule's quota and where the request's key stands under it: the
/// `RateLimit-Policy` and `RateLimit` fields a client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    /// The rule.
    pub rule: Arc<str>,
    /// The most cost the rule admits at once from a fresh key (`q`).
    pub quota: u64,
    /// The time the quota applies over (`w`): a window, or the time a
    /// bucket takes to refill its quota.
    pub window: Duration,
    /// What the key may still spend at once (`r`).
    pub remaining: u64,
    /// When the key holds its whole quota again if nothing arrives (`t`).
    pub reset: Duration,
}

/// A soft limit a request went over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The rule whose soft limit was exceeded.
    pub rule: Arc<str>,
    /// The rule's hard quota (`RateLimit-Limit`).
    pub limit: u64,
    /// What the hard limit still admits at once (`RateLimit-Remaining`).
    pub remaining: u64,
}

/// An admitted request. Call [`finish`](Permit::finish) with the measured
/// cost when it completes to post-account a predicted cost; dropping it
/// keeps the charge as predicted.
#[derive(Debug)]
pub struct Permit {
    throttler: Throttler,
    cost: u64,
    class: Option<String>,
    delay: Duration,
    warnings: Vec<Warning>,
    limits: Vec<LimitStatus>,
    /// The rules in force when it was admitted.
    rules: Rules,
    /// What it was charged to, in rule order.
    charged: Vec<Charge>,
    /// It passed the admission queue, which charged its cost to its rate.
    queued: bool,
}

impl Permit {
    /// The cost charged.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// How long the rules delayed the request (already waited by
    /// [`Throttler::admit`]; to be waited by callers of [`Throttler::check`]).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Soft limits exceeded.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The quotas and standings of the rules that admitted it, for those
    /// with headers on ([`Rule::ratelimit_headers`]).
    pub fn limits(&self) -> &[LimitStatus] {
        &self.limits
    }

    /// Post-accounting: records the request's measured cost for its class
    /// (with [`CostModel::Predicted`]) and charges the difference from the
    /// predicted cost to every key it was charged to (a refund if lower),
    /// and to the admission queue's rate if it passed the queue (those
    /// queued behind it then leave that much later, or earlier).
    /// With other cost models it does nothing.
    pub fn finish(self, measured: u64) {
        let inner = &self.throttler.inner;
        let (Some(predictor), Some(class)) = (&inner.predictor, &self.class) else {
            return;
        };
        predictor.record(class, measured);
        let delta = i64::try_from(measured)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(self.cost).unwrap_or(i64::MAX));
        if delta == 0 {
            return;
        }
        let now = inner.clock.now_ns();
        for charge in &self.charged {
            let rule = &self.rules[charge.rule];
            rule.hard.settle(&charge.key, now, delta);
            if let (true, Some(s)) = (charge.soft, &rule.soft) {
                s.settle(&charge.key, now, delta);
            }
        }
        if let (true, Some(queue)) = (self.queued, &inner.queue) {
            queue.lock_unpoisoned().core.settle(now, delta);
        }
    }
}

/// One rule's charge of a request.
#[derive(Debug)]
struct Charge {
    /// The rule's index in the permit's rules.
    rule: usize,
    key: String,
    /// The rule's soft limit was charged too.
    soft: bool,
    /// The rule's entry in the permit's limits, if it reports one.
    status: Option<usize>,
}

type Waiter = oneshot::Sender<Result<(), RejectionKind>>;

#[derive(Debug)]
struct QueueState {
    core: AdmissionQueue<Waiter>,
    driving: bool,
}

/// A set of live rules, swapped whole on reload.
type Rules = Arc<[Arc<LiveRule>]>;

pub(crate) struct Inner {
    rules: RwLock<Rules>,
    clock: Arc<dyn Clock>,
    /// Added to a retry time: the clock's step, if it moves in steps.
    retry_slack_ns: u64,
    cost: CostModel,
    predictor: Option<CostPredictor>,
    /// The criticality header and the peers it is believed from.
    criticality_header: Option<(String, Trust)>,
    default_criticality: Criticality,
    /// Every rule reports its standing (as if each had headers on).
    headers: bool,
    queue: Option<Mutex<QueueState>>,
    /// The queue's capacity, read without its lock.
    queue_capacity: Option<u64>,
    pub(crate) metrics: ThrottleMetrics,
}

/// A server-side throttler: rules per key, an optional admission queue
/// with criticality, soft and hard limits, bans and shadow mode.
///
/// Cloning is cheap and shares the state.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{Extract, FixedWindow, Limit, RequestHead, Rule, Throttler};
/// use std::time::Duration;
///
/// let throttler = Throttler::builder()
///     .rule(Rule::new(
///         "per-api-key",
///         Extract::header("x-api-key"),
///         Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(60))?),
///     ))
///     .build();
/// let req = axum::http::Request::builder().header("x-api-key", "k1").body(())?;
/// assert!(throttler.check(&RequestHead::of(&req)).is_ok());
/// let err = throttler.check(&RequestHead::of(&req)).unwrap_err();
/// assert_eq!(err.to_string(), "rate limited by rule \"per-api-key\"");
/// assert_eq!(err.http_status(), 429);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Throttler {
    inner: Arc<Inner>,
}

/// Builds a [`Throttler`].
#[derive(Debug)]
pub struct ThrottlerBuilder {
    rules: Vec<Rule>,
    clock: Option<Arc<dyn Clock>>,
    cost: CostModel,
    max_classes: usize,
    criticality_header: Option<(String, Trust)>,
    default_criticality: Criticality,
    headers: bool,
    queue: Option<(u64, RateSpec)>,
}

impl ThrottlerBuilder {
    /// Adds a rule; rules apply in the order added.
    pub fn rule(mut self, rule: Rule) -> ThrottlerBuilder {
        self.rules.push(rule);
        self
    }

    /// The clock (default: [`SystemClock`]). With a coarse one
    /// ([`CoarseClock`](tollgate::CoarseClock)), token-pool rules widen their
    /// active pools to cover one and a half of its steps
    /// ([`TokenPool::with_clock_step`](super::TokenPool::with_clock_step)).
    pub fn clock(mut self, clock: impl Clock) -> ThrottlerBuilder {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// How requests are costed (default: 1 each).
    pub fn cost(mut self, cost: CostModel) -> ThrottlerBuilder {
        self.cost = cost;
        self
    }

    /// The criticality of a request that says none (default
    /// NOT_CRITICAL). See [`Throttler::criticality`] for who may say.
    pub fn default_criticality(mut self, default: Criticality) -> ThrottlerBuilder {
        self.default_criticality = default;
        self
    }

    /// Believes the header (or gRPC metadata) `name` holding `CRITICAL` /
    /// `NOT_CRITICAL` on requests from the peers `trusted` names (say, the
    /// other services of the cluster); from any other peer the header is
    /// ignored. By default no header is believed: a client that could
    /// declare itself CRITICAL could evict everyone else from the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_throttle::{Criticality, PeerAddr, RequestHead, Throttler, Trust};
    ///
    /// let throttler = Throttler::builder()
    ///     .criticality_header("x-criticality", Trust::networks(["10.0.0.0/8"])?)
    ///     .build();
    /// let mut req = axum::http::Request::builder()
    ///     .header("x-criticality", "CRITICAL")
    ///     .body(())?;
    /// req.extensions_mut().insert(PeerAddr("192.0.2.1:5000".parse()?));
    /// assert_eq!(throttler.criticality(&RequestHead::of(&req)), Criticality::NotCritical);
    /// req.extensions_mut().insert(PeerAddr("10.0.0.7:5000".parse()?));
    /// assert_eq!(throttler.criticality(&RequestHead::of(&req)), Criticality::Critical);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn criticality_header(mut self, name: &str, trusted: Trust) -> ThrottlerBuilder {
        self.criticality_header = Some((name.to_ascii_lowercase(), trusted));
        self
    }

    /// Turns on the `RateLimit-Policy` and `RateLimit` fields for every
    /// rule, present and reloaded ([`Rule::ratelimit_headers`] turns them
    /// on for one).
    pub fn ratelimit_headers(mut self, yes: bool) -> ThrottlerBuilder {
        self.headers = yes;
        self
    }

    /// An admission queue holding up to `capacity` units of cost, released
    /// at `rate` units per second (its burst ratio is unused).
    pub fn queue(mut self, capacity: u64, rate: RateSpec) -> ThrottlerBuilder {
        self.queue = Some((capacity, rate));
        self
    }

    /// The throttler.
    pub fn build(self) -> Throttler {
        let predictor = match &self.cost {
            CostModel::Predicted { default, .. } => {
                Some(CostPredictor::new(*default, self.max_classes))
            }
            _ => None,
        };
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        let step_ns = clock.resolution_ns();
        let step = Duration::from_nanos(step_ns);
        let rules: Rules = self
            .rules
            .into_iter()
            .map(|r| Arc::new(LiveRule::new(r, step)))
            .collect();
        let metrics = ThrottleMetrics::new();
        let inner = Arc::new(Inner {
            rules: RwLock::new(rules),
            retry_slack_ns: if step_ns > 1 { step_ns } else { 0 },
            clock,
            cost: self.cost,
            predictor,
            criticality_header: self.criticality_header,
            default_criticality: self.default_criticality,
            headers: self.headers,
            queue_capacity: self.queue.as_ref().map(|(capacity, _)| *capacity),
            queue: self.queue.map(|(capacity, rate)| {
                Mutex::new(QueueState {
                    core: AdmissionQueue::new(capacity, rate.nano_ops_per_sec()),
                    driving: false,
                })
            }),
            metrics,
        });
        let state: Weak<Inner> = Arc::downgrade(&inner);
        inner.metrics.watch(state);
        Throttler { inner }
    }
}

impl Throttler {
    /// A builder with no rules, unit costs and no queue.
    pub fn builder() -> ThrottlerBuilder {
        ThrottlerBuilder {
            rules: Vec::new(),
            clock: None,
            cost: CostModel::Fixed(1),
            max_classes: 10_000,
            criticality_header: None,
            default_criticality: Criticality::NotCritical,
            headers: false,
            queue: None,
        }
    }

    /// The throttler's Prometheus registry (decisions, keys, bans, queue).
    pub fn registry(&self) -> &prometheus::Registry {
        self.inner.metrics.registry()
    }

    /// Whether costs are predicted, so that [`Permit::finish`] needs the
    /// measured cost.
    pub(crate) fn predicts_cost(&self) -> bool {
        self.inner.predictor.is_some()
    }

    /// The criticality of a request: a [`Criticality`] extension set by a
    /// layer in front of the throttler (after authenticating the caller,
    /// say); else the criticality header, only from a trusted peer
    /// ([`ThrottlerBuilder::criticality_header`]); else the default.
    pub fn criticality(&self, head: &RequestHead<'_>) -> Criticality {
        if let Some(c) = head.extensions.get::<Criticality>() {
            return *c;
        }
        self.inner
            .criticality_header
            .as_ref()
            .filter(|(_, trusted)| trusted.trusts(head.peer_addr()))
            .and_then(|(name, _)| head.headers.get(name.as_str()))
            .and_then(|v| v.to_str().ok())
            .and_then(Criticality::parse)
            .unwrap_or(self.inner.default_criticality)
    }

    /// The request's cost and, when predicted, its class. A prediction is
    /// at most what every enforced rule and the queue can admit (`most`):
    /// a class whose measured costs grew beyond that is admitted at that
    /// cost and post-accounted the rest, rather than refused for ever.
    fn cost_of(&self, head: &RequestHead<'_>, most: impl Fn() -> u64) -> (u64, Option<String>) {
        match &self.inner.cost {
            CostModel::Fixed(c) => (*c, None),
            CostModel::Header { name, default } => (
                head.headers
                    .get(name.as_str())
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(*default),
                None,
            ),
            CostModel::Predicted { class, default } => match class.key(head) {
                Some(c) => {
                    let predicted = self
                        .inner
                        .predictor
                        .as_ref()
                        .map_or(*default, |p| p.predict(&c));
                    (predicted.min(most()), Some(c))
                }
                None => (*default, None),
            },
        }
    }

    /// Applies the rules only (no queue, no waiting): the permit's delay is
    /// for the caller to wait.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] when an enforced rule rejects; nothing is charged.
    pub fn check(&self, head: &RequestHead<'_>) -> Result<Permit, Rejection> {
        self.decide(head, None)
    }

    /// The rules' decision, refusing first a cost above `queue_capacity`.
    fn decide(
        &self,
        head: &RequestHead<'_>,
        queue_capacity: Option<u64>,
    ) -> Result<Permit, Rejection> {
        let inner = &self.inner;
        let rules = inner.rules();
        let (cost, class) = self.cost_of(head, || {
            rules
                .iter()
                .filter(|r| r.mode == Mode::Enforce)
                .map(|r| r.hard.max_cost())
                .chain(queue_capacity)
                .min()
                .unwrap_or(u64::MAX)
        });
        if let Some(capacity) = queue_capacity.filter(|c| cost > *c) {
            inner.metrics.queue("too_costly");
            return Err(Rejection::too_costly(None, cost, capacity));
        }
        let now = inner.clock.now_ns();
        let mut permit = Permit {
            throttler: self.clone(),
            cost,
            class,
            delay: Duration::ZERO,
            warnings: Vec::new(),
            limits: Vec::new(),
            rules: rules.clone(),
            charged: Vec::new(),
            queued: false,
        };
        for (i, rule) in rules.iter().enumerate() {
            let key = match rule.key_of(head) {
                Ok(Some(key)) => key,
                Ok(None) => continue,
                Err(()) => {
                    inner.metrics.decision(&rule.name, "no_key");
                    if rule.mode == Mode::Shadow {
                        continue;
                    }
                    self.refund(&mut permit, now);
                    let name = Some(rule.name.clone());
                    return Err(Rejection::new(RejectionKind::NoKey, name, None));
                }
            };
            let shadow = rule.mode == Mode::Shadow;
            let want = rule.headers || inner.headers;
            let c = rule.hard.check(&key, now, cost, rule.ban_ns, want);
            let status = c.standing.map(|st| {
                permit.limits.push(self.status(rule, st));
                permit.limits.len() - 1
            });
            let outcome = match c.verdict {
                Verdict::Reject { retry_after_ns } => {
                    let most = rule.hard.max_cost();
                    let kind = if c.banned {
                        RejectionKind::Banned
                    } else if cost > most {
                        RejectionKind::CostTooHigh
                    } else {
                        RejectionKind::Limited
                    };
                    inner.metrics.decision(&rule.name, kind_label(kind, shadow));
                    if c.ban_started {
                        inner.metrics.decision(&rule.name, "ban_started");
                    }
                    if shadow {
                        continue;
                    }
                    self.refund(&mut permit, now);
                    let name = Some(rule.name.clone());
                    let mut rejection = if kind == RejectionKind::CostTooHigh {
                        Rejection::too_costly(name, cost, most)
                    } else {
                        let wait = retry_after_ns.saturating_add(inner.retry_slack_ns);
                        Rejection::new(kind, name, Some(Duration::from_nanos(wait)))
                    };
                    rejection.limits = std::mem::take(&mut permit.limits);
                    return Err(rejection);
                }
                Verdict::Delay { delay_ns } => {
                    permit.delay = permit.delay.max(Duration::from_nanos(delay_ns));
                    "delayed"
                }
                Verdict::Admit { .. } => "admitted",
            };
            inner.metrics.decision(&rule.name, outcome);
            let mut soft_charged = false;
            if let Some(soft) = &rule.soft {
                if soft
                    .check(&key, now, cost, None, false)
                    .verdict
                    .is_admitted()
                {
                    soft_charged = true;
                } else {
                    inner.metrics.decision(&rule.name, "soft_exceeded");
                    permit.warnings.push(Warning {
                        rule: rule.name.clone(),
                        limit: rule.hard.quota(),
                        remaining: match c.verdict {
                            Verdict::Admit { remaining } => remaining,
                            _ => 0,
                        },
                    });
                }
            }
            permit.charged.push(Charge {
                rule: i,
                key,
                soft: soft_charged,
                status,
            });
        }
        Ok(permit)
    }

    /// What a client is told of `rule` for a key standing at `st`.
    fn status(&self, rule: &LiveRule, st: Standing) -> LimitStatus {
        LimitStatus {
            rule: rule.name.clone(),
            quota: rule.hard.quota(),
            window: Duration::from_nanos(rule.hard.window_ns()),
            remaining: st.remaining,
            reset: Duration::from_nanos(if st.reset_ns == 0 {
                0
            } else {
                st.reset_ns.saturating_add(self.inner.retry_slack_ns)
            }),
        }
    }

    /// Gives back what a refused request was charged, and reports each
    /// refunded rule's standing as it is after the refund: the standing
    /// taken when the rule was charged counts a charge that no longer is.
    fn refund(&self, permit: &mut Permit, now: u64) {
        let delta = -i64::try_from(permit.cost).unwrap_or(i64::MAX);
        for charge in std::mem::take(&mut permit.charged) {
            let rule = &permit.rules[charge.rule];
            let st = rule
                .hard
                .settle_with(&charge.key, now, delta, charge.status.is_some());
            if let (Some(at), Some(st)) = (charge.status, st) {
                permit.limits[at] = self.status(rule, st);
            }
            if let (true, Some(s)) = (charge.soft, &rule.soft) {
                s.settle(&charge.key, now, delta);
            }
        }
    }

    /// Applies the rules, waits any delay they impose, then passes the
    /// admission queue (if configured) in the request's criticality.
    ///
    /// Needs a tokio runtime when a queue is configured (its driver is a
    /// task).
    ///
    /// # Errors
    ///
    /// A [`Rejection`] from a rule, a full queue or an eviction; nothing
    /// stays charged. A cost above the queue's capacity is refused before
    /// the rules, busy or idle ([`RejectionKind::CostTooHigh`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits keeps the rules' charge; a
    /// queued request whose future is dropped leaves the queue at once,
    /// without using its rate.
    pub async fn admit(&self, head: &RequestHead<'_>) -> Result<Permit, Rejection> {
        let queue = self.inner.queue.as_ref();
        let capacity = self.inner.queue_capacity;
        let mut permit = self.decide(head, capacity)?;
        if !permit.delay.is_zero() {
            tokio::time::sleep(permit.delay).await;
        }
        let Some(queue) = queue else {
            return Ok(permit);
        };
        let criticality = self.criticality(head);
        let (tx, rx) = oneshot::channel();
        let offer = {
            let mut q = queue.lock_unpoisoned();
            let offer = q
                .core
                .offer(tx, permit.cost, criticality, self.inner.clock.now_ns());
            if matches!(offer, Offer::Queued { .. }) && !q.driving {
                q.driving = true;
                tokio::spawn(drive(self.inner.clone()));
            }
            offer
        };
        let result = match offer {
            Offer::Now(_) => {
                self.inner.metrics.queue("immediate");
                Ok(())
            }
            Offer::Full(_) => {
                self.inner.metrics.queue("full");
                Err(RejectionKind::QueueFull)
            }
            Offer::TooCostly(_) => {
                // The capacity was checked before the rules; kept for a
                // queue whose capacity no longer matches.
                self.inner.metrics.queue("too_costly");
                self.refund(&mut permit, self.inner.clock.now_ns());
                return Err(Rejection::too_costly(
                    None,
                    permit.cost,
                    capacity.unwrap_or(0),
                ));
            }
            Offer::Queued { ticket, evicted } => {
                self.inner.metrics.queue("queued");
                for waiter in evicted {
                    self.inner.metrics.queue("evicted");
                    let _ = waiter.send(Err(RejectionKind::Evicted));
                }
                // Leaves the queue if this future is dropped while waiting.
                let place = Place { queue, ticket };
                let result = rx.await.unwrap_or(Err(RejectionKind::QueueFull));
                std::mem::forget(place);
                result
            }
        };
        match result {
            Ok(()) => {
                permit.queued = true;
                Ok(permit)
            }
            Err(kind) => {
                let now = self.inner.clock.now_ns();
                self.refund(&mut permit, now);
                let free_at = queue.lock_unpoisoned().core.free_at_ns();
                let wait = free_at
                    .saturating_sub(now)
                    .saturating_add(self.inner.retry_slack_ns);
                let mut rejection = Rejection::new(kind, None, Some(Duration::from_nanos(wait)));
                rejection.limits = std::mem::take(&mut permit.limits);
                Err(rejection)
            }
        }
    }

    /// Replaces the rules. A new rule identical to a current one (same
    /// name, key, limits, ban, mode and key cap) keeps its keys' state;
    /// every other rule starts with no keys. Requests admitted under the
    /// old rules are post-accounted to them.
    pub fn reload(&self, rules: Vec<Rule>) {
        let old = self.inner.rules();
        let step = Duration::from_nanos(self.inner.clock.resolution_ns());
        let new: Rules = rules
            .into_iter()
            .map(|rule| {
                let fingerprint = format!("{rule:?}");
                old.iter()
                    .find(|live| live.fingerprint == fingerprint)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(LiveRule::new(rule, step)))
            })
            .collect();
        *self.inner.rules.write_unpoisoned() = new;
    }

    /// Drops idle keys of every rule now (inserts also do this lazily).
    pub fn sweep(&self) {
        let now = self.inner.clock.now_ns();
        for rule in self.inner.rules().iter() {
            rule.hard.sweep(now);
            if let Some(s) = &rule.soft {
                s.sweep(now);
            }
        }
    }
}

fn kind_label(kind: RejectionKind, shadow: bool) -> &'static str {
    match (kind, shadow) {
        (RejectionKind::Banned, false) => "banned",
        (RejectionKind::Banned, true) => "shadow_banned",
        (RejectionKind::CostTooHigh, false) => "too_costly",
        (RejectionKind::CostTooHigh, true) => "shadow_too_costly",
        (_, false) => "rejected",
        (_, true) => "shadow_rejected",
    }
}

/// A place in the admission queue, given up when dropped: a waiting
/// request whose future is dropped leaves the queue at once.
struct Place<'a> {
    queue: &'a Mutex<QueueState>,
    ticket: u64,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.queue.lock_unpoisoned().core.leave(self.ticket);
    }
}

/// Releases queued requests at the queue's rate until it is empty.
async fn drive(inner: Arc<Inner>) {
    let Some(queue) = &inner.queue else {
        return;
    };
    loop {
        let wait = {
            let mut q = queue.lock_unpoisoned();
            let now = inner.clock.now_ns();
            for waiter in q.core.release(now, |w| !w.is_closed()) {
                let _ = waiter.send(Ok(()));
            }
            match q.core.next_release_ns() {
                None => {
                    q.driving = false;
                    return;
                }
                Some(at) => at.saturating_sub(now),
            }
        };
        tokio::time::sleep(Duration::from_nanos(wait.max(1))).await;
    }
}

impl Inner {
    /// The rules in force.
    pub(crate) fn rules(&self) -> Rules {
        self.rules.read_unpoisoned().clone()
    }
}

impl State for Inner {
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    fn each_rule(&self, now_ns: u64, each: &mut dyn FnMut(&str, usize, usize)) {
        for rule in self.rules().iter() {
            each(&rule.name, rule.hard.len(), rule.hard.banned(now_ns));
        }
    }

    fn queue_state(&self) -> Option<(u64, usize)> {
        self.queue.as_ref().map(|q| {
            let q = q.lock_unpoisoned();
            (q.core.queued_cost(), q.core.len())
        })
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttler")
            .field("rules", &self.rules)
            .field("cost", &self.cost)
            .field("criticality_header", &self.criticality_header)
            .field("queue", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Throttler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
