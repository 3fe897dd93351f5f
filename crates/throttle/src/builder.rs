//! [`ThrottlerBuilder`]: a [`Throttler`]'s rules, clock, cost model,
//! criticality and admission queue.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tollgate::{Clock, RateSpec, SystemClock};

use super::cost::{CostModel, CostPredictor};
use super::decision::{Inner, Rules};
use super::live_rule::LiveRule;
use super::metrics::ThrottleMetrics;
use super::queue::{Admission, Criticality};
use super::rules::Rule;
use super::shared::{RedisStore, StoreError};
use super::throttler::Throttler;
use super::trust::Trust;

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
    store: Option<RedisStore>,
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
    /// ([`TokenPool::with_clock_step`](crate::TokenPool::with_clock_step)).
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

    /// Keeps the rules' keyed state in Redis, shared with every throttler
    /// (every replica) on the same Redis, key prefix and rule names.
    /// Decisions then take one script call per request (all its rules at
    /// once) through [`Throttler::admit`] and
    /// [`Throttler::decide`](crate::Throttler::decide), and fall back to
    /// the store's [`OnError`](crate::OnError) mode when Redis fails;
    /// [`Throttler::check`] decides on this replica's fallback tables
    /// alone. Every rule must be one the store keeps
    /// ([`RedisStore::supports_rule`]).
    pub fn store(mut self, store: RedisStore) -> ThrottlerBuilder {
        self.store = Some(store);
        self
    }

    /// The throttler, or the first rule its store cannot keep.
    ///
    /// # Errors
    ///
    /// With a [`store`](Self::store), a rule the store cannot keep (see
    /// [`RedisStore::supports_rule`]): one line naming the rule.
    pub fn try_build(self) -> Result<Throttler, StoreError> {
        if self.store.is_some() {
            for rule in &self.rules {
                RedisStore::supports_rule(rule)?;
            }
        }
        Ok(self.build_unchecked())
    }

    /// The throttler.
    ///
    /// # Panics
    ///
    /// With a [`store`](Self::store) that cannot keep one of the rules;
    /// [`try_build`](Self::try_build) returns that as an error.
    pub fn build(self) -> Throttler {
        match self.try_build() {
            Ok(throttler) => throttler,
            Err(e) => panic!("{e}"),
        }
    }

    fn build_unchecked(self) -> Throttler {
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
            .map(|r| Arc::new(LiveRule::new(r, step, self.store.as_ref())))
            .collect();
        let metrics = ThrottleMetrics::new();
        let queue = self
            .queue
            .map(|(capacity, rate)| Arc::new(Admission::new(capacity, rate, clock.clone())));
        let inner = Arc::new(Inner {
            rules: RwLock::new(rules),
            retry_slack_ns: if step_ns > 1 { step_ns } else { 0 },
            clock,
            cost: self.cost,
            predictor,
            criticality_header: self.criticality_header,
            default_criticality: self.default_criticality,
            headers: self.headers,
            queue,
            metrics,
            store: self.store,
        });
        let state: Weak<Inner> = Arc::downgrade(&inner);
        inner.metrics.watch(state);
        Throttler::from_inner(inner)
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
            store: None,
        }
    }
}
