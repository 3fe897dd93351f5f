//! [`Throttler`]: applies the rules to a request, then the admission
//! queue, and hands back a [`Permit`] or a [`Rejection`].
//!
//! # Implementation notes
//!
//! [`Throttler::check`] is the decision alone (see `decision.rs`).
//! [`Throttler::admit`] takes the decision, waits the delay the rules
//! impose (a GCRA queue), then passes the admission queue if one is
//! configured (see `queue.rs`): at once when the queue is idle, otherwise
//! when its driver releases the request at the queue's cost rate. An
//! evicted or refused request is refunded, so it costs nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate_service::RwLockUnpoisoned;

use super::decision::{Inner, Permit, Rules};
use super::live_rule::LiveRule;
use super::outcome::{Rejection, RejectionKind};
use super::queue::Criticality;
use super::rules::{RequestHead, Rule, RuleKey};
use super::shared::RedisStore;

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

impl Throttler {
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Throttler {
        Throttler { inner }
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
    /// ([`ThrottlerBuilder::criticality_header`](crate::ThrottlerBuilder::criticality_header)); else the default.
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

    /// Applies the rules only (no queue, no waiting): the permit's delay is
    /// for the caller to wait.
    ///
    /// It decides in this process's memory: with a Redis store
    /// ([`ThrottlerBuilder::store`](crate::ThrottlerBuilder::store)), on
    /// the replica's own fallback tables (each limit divided by the
    /// replicas); [`decide`](Self::decide) and [`admit`](Self::admit) go
    /// through Redis.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] when an enforced rule rejects; nothing is charged.
    pub fn check(&self, head: &RequestHead<'_>) -> Result<Permit, Rejection> {
        self.inner.decide(head, None)
    }

    /// Applies the rules through the throttler's store (one Redis call for
    /// all of them, or memory), without waiting: the permit's delay is for
    /// the caller to wait. Without a Redis store it is [`check`](Self::check).
    ///
    /// # Errors
    ///
    /// A [`Rejection`] when an enforced rule rejects (nothing is charged),
    /// or when Redis fails under [`OnError::Deny`](crate::OnError::Deny).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the request charged in Redis.
    pub async fn decide(&self, head: &RequestHead<'_>) -> Result<Permit, Rejection> {
        self.inner.decide_shared(head, None).await
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
        let capacity = queue.map(|q| q.capacity());
        let mut permit = self.inner.decide_shared(head, capacity).await?;
        if !permit.delay().is_zero() {
            tokio::time::sleep(permit.delay()).await;
        }
        let Some(queue) = queue else {
            return Ok(permit);
        };
        let criticality = self.criticality(head);
        let inner = &self.inner;
        match queue.pass(permit.cost(), criticality, &inner.metrics).await {
            Ok(()) => {
                permit.queued = true;
                Ok(permit)
            }
            Err(RejectionKind::CostTooHigh) => {
                // The capacity was checked before the rules; kept for a
                // queue whose capacity no longer matches.
                inner.refund(&mut permit, inner.clock.now_ns());
                Err(Rejection::too_costly(
                    None,
                    permit.cost(),
                    capacity.unwrap_or(0),
                ))
            }
            Err(kind) => {
                let now = inner.clock.now_ns();
                inner.refund(&mut permit, now);
                let wait = queue
                    .free_at_ns()
                    .saturating_sub(now)
                    .saturating_add(inner.retry_slack_ns);
                let rejection = Rejection::new(kind, None, Some(Duration::from_nanos(wait)));
                Err(rejection.with_limits(std::mem::take(&mut permit.limits)))
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
        // The first rule in force with an identity, as rules are applied.
        let mut live: HashMap<&RuleKey, &Arc<LiveRule>> = HashMap::new();
        for rule in old.iter() {
            live.entry(&rule.id).or_insert(rule);
        }
        let new: Rules = rules
            .into_iter()
            .map(|rule| match live.get(&rule.key()) {
                Some(kept) => Arc::clone(kept),
                None => {
                    let store = self.inner.store.as_ref();
                    if let (Some(_), Err(e)) = (store, RedisStore::supports_rule(&rule)) {
                        tracing::error!(
                            "{e}; every rule is decided on this replica alone \
                             (at its limit divided by the replicas) until it changes"
                        );
                    }
                    Arc::new(LiveRule::new(rule, step, store))
                }
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

impl fmt::Debug for Throttler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
