//! The decision: the rules applied to one request, in order, giving a
//! [`Permit`] or a [`Rejection`], and the permit's post-accounting.
//!
//! # Implementation notes
//!
//! A decision reads the cost (fixed, from a header, or predicted for the
//! request's class) and walks the rules in order. For each rule that
//! yields a key, the hard limit decides first (through the key's ban, if
//! the rule bans); if it admits, the soft limit is checked and a warning
//! recorded when it would reject. The first enforced rejection refunds
//! what the earlier rules charged, so a rejected request costs nothing.
//! Shadow rules decide and count but never reject.
//!
//! The permit's `finish` does post-accounting: with predicted costs it
//! records the measured cost for the class and charges (or refunds) the
//! difference to every key the request was charged to, and, when the
//! request passed the admission queue, to the queue's schedule as well
//! (see the queue's notes).

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tollgate::Clock;
use tollgate_service::RwLockUnpoisoned;

use super::cost::{CostModel, CostPredictor};
use super::live_rule::LiveRule;
use super::metrics::{State, ThrottleMetrics};
use super::outcome::{LimitStatus, Rejection, RejectionKind, Warning};
use super::policy::{Standing, Verdict};
use super::queue::{Admission, Criticality};
use super::rules::{Mode, RequestHead};
use super::shared::{Answer, Item, OnError, RedisStore, Role, Spent};
use super::trust::Trust;

/// An admitted request. Call [`finish`](Permit::finish) with the measured
/// cost when it completes to post-account a predicted cost; dropping it
/// keeps the charge as predicted.
#[derive(Debug)]
pub struct Permit {
    throttler: Arc<Inner>,
    cost: u64,
    class: Option<String>,
    delay: Duration,
    warnings: Vec<Warning>,
    pub(crate) limits: Vec<LimitStatus>,
    /// The rules in force when it was admitted.
    rules: Rules,
    /// What it was charged to, in rule order.
    charged: Vec<Charge>,
    /// It passed the admission queue, which charged its cost to its rate.
    pub(crate) queued: bool,
    /// Its charges are in the throttler's Redis store.
    shared: bool,
}

impl Permit {
    /// The cost charged.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// How long the rules delayed the request (already waited by
    /// [`Throttler::admit`](crate::Throttler::admit); to be waited by callers of [`Throttler::check`](crate::Throttler::check)).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Soft limits exceeded.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The quotas and standings of the rules that admitted it, for those
    /// with headers on ([`Rule::ratelimit_headers`](crate::Rule::ratelimit_headers)).
    pub fn limits(&self) -> &[LimitStatus] {
        &self.limits
    }

    /// Post-accounting: records the request's measured cost for its class
    /// (with [`CostModel::Predicted`](crate::CostModel::Predicted)) and charges the difference from the
    /// predicted cost to every key it was charged to (a refund if lower),
    /// and to the admission queue's rate if it passed the queue (those
    /// queued behind it then leave that much later, or earlier).
    /// With other cost models it does nothing.
    pub fn finish(self, measured: u64) {
        let inner = &self.throttler;
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
        if self.shared {
            inner.settle_shared(&self, delta);
            if let (true, Some(queue)) = (self.queued, &inner.queue) {
                queue.settle(now, delta);
            }
            return;
        }
        for charge in &self.charged {
            let rule = &self.rules[charge.rule];
            rule.hard.settle(&charge.key, now, delta);
            if let (true, Some(s)) = (charge.soft, &rule.soft) {
                s.settle(&charge.key, now, delta);
            }
        }
        if let (true, Some(queue)) = (self.queued, &inner.queue) {
            queue.settle(now, delta);
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

/// A set of live rules, swapped whole on reload.
pub(crate) type Rules = Arc<[Arc<LiveRule>]>;

/// A throttler's state, shared by its clones, its permits and its
/// metrics.
pub(crate) struct Inner {
    pub(crate) rules: RwLock<Rules>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Added to a retry time: the clock's step, if it moves in steps.
    pub(crate) retry_slack_ns: u64,
    pub(crate) cost: CostModel,
    pub(crate) predictor: Option<CostPredictor>,
    /// The criticality header and the peers it is believed from.
    pub(crate) criticality_header: Option<(String, Trust)>,
    pub(crate) default_criticality: Criticality,
    /// Every rule reports its standing (as if each had headers on).
    pub(crate) headers: bool,
    pub(crate) queue: Option<Arc<Admission>>,
    pub(crate) metrics: ThrottleMetrics,
    /// Where the rules' keyed state lives, when not only in memory.
    pub(crate) store: Option<RedisStore>,
}

impl Inner {
    /// The rules in force.
    pub(crate) fn rules(&self) -> Rules {
        self.rules.read_unpoisoned().clone()
    }

    /// The rules' decision, refusing first a cost above `queue_capacity`.
    pub(crate) fn decide(
        self: &Arc<Self>,
        head: &RequestHead<'_>,
        queue_capacity: Option<u64>,
    ) -> Result<Permit, Rejection> {
        let rules = self.rules();
        let mut permit = self.permit(&rules, head, queue_capacity)?;
        let now = permit.now;
        for (i, rule) in rules.iter().enumerate() {
            self.apply(i, rule, head, now, &mut permit.permit)?;
        }
        Ok(permit.permit)
    }

    /// A permit for `head` charged to nothing yet, or the rejection of a
    /// cost above `queue_capacity`.
    fn permit(
        self: &Arc<Self>,
        rules: &Rules,
        head: &RequestHead<'_>,
        queue_capacity: Option<u64>,
    ) -> Result<Blank, Rejection> {
        let (cost, class) = self.cost.cost_of(self.predictor.as_ref(), head, || {
            rules
                .iter()
                .filter(|r| r.mode == Mode::Enforce)
                .map(|r| r.max_cost())
                .chain(queue_capacity)
                .min()
                .unwrap_or(u64::MAX)
        });
        if let Some(capacity) = queue_capacity.filter(|c| cost > *c) {
            self.metrics.queue("too_costly");
            return Err(Rejection::too_costly(None, cost, capacity));
        }
        let now = self.clock.now_ns();
        let permit = Permit {
            throttler: Arc::clone(self),
            cost,
            class,
            delay: Duration::ZERO,
            warnings: Vec::new(),
            limits: Vec::new(),
            rules: rules.clone(),
            charged: Vec::new(),
            queued: false,
            shared: false,
        };
        Ok(Blank { permit, now })
    }

    /// Applies `rule`, the `i`th in force, to a request at `now`: charges
    /// it to the permit, or refunds the permit and rejects it.
    fn apply(
        &self,
        i: usize,
        rule: &LiveRule,
        head: &RequestHead<'_>,
        now: u64,
        permit: &mut Permit,
    ) -> Result<(), Rejection> {
        let key = match rule.key_of(head) {
            Ok(Some(key)) => key,
            Ok(None) => return Ok(()),
            Err(()) => {
                self.metrics.decision(&rule.name, "no_key");
                if rule.mode == Mode::Shadow {
                    return Ok(());
                }
                self.refund(permit, now);
                let name = Some(rule.name.clone());
                return Err(Rejection::new(RejectionKind::NoKey, name, None));
            }
        };
        let shadow = rule.mode == Mode::Shadow;
        let want = rule.headers || self.headers;
        let c = rule.hard.check(&key, now, permit.cost, rule.ban_ns, want);
        let status = c.standing.map(|st| {
            permit.limits.push(self.status(rule, st));
            permit.limits.len() - 1
        });
        let outcome = match c.verdict {
            Verdict::Reject { retry_after_ns } => {
                let kind = if c.banned {
                    RejectionKind::Banned
                } else if permit.cost > rule.max_cost() {
                    RejectionKind::CostTooHigh
                } else {
                    RejectionKind::Limited
                };
                self.metrics.decision(&rule.name, kind_label(kind, shadow));
                if c.ban_started {
                    self.metrics.decision(&rule.name, "ban_started");
                }
                if shadow {
                    return Ok(());
                }
                self.refund(permit, now);
                return Err(self.rejection(rule, kind, permit, retry_after_ns));
            }
            Verdict::Delay { delay_ns } => {
                permit.delay = permit.delay.max(Duration::from_nanos(delay_ns));
                "delayed"
            }
            Verdict::Admit { .. } => "admitted",
        };
        self.metrics.decision(&rule.name, outcome);
        let mut soft_charged = false;
        if let Some(soft) = &rule.soft {
            if soft
                .check(&key, now, permit.cost, None, false)
                .verdict
                .is_admitted()
            {
                soft_charged = true;
            } else {
                self.soft_exceeded(permit, rule, c.verdict);
            }
        }
        permit.charged.push(Charge {
            rule: i,
            key,
            soft: soft_charged,
            status,
        });
        Ok(())
    }

    /// What a client is told of `rule` for a key standing at `st`.
    /// The answer to a request that `rule` refuses as `kind` (the charges
    /// already undone): when to retry, or for a cost above what the rule
    /// ever admits, that cost; with the statuses gathered so far.
    fn rejection(
        &self,
        rule: &LiveRule,
        kind: RejectionKind,
        permit: &mut Permit,
        retry_after_ns: u64,
    ) -> Rejection {
        let name = Some(rule.name.clone());
        let rejection = if kind == RejectionKind::CostTooHigh {
            Rejection::too_costly(name, permit.cost, rule.max_cost())
        } else {
            let wait = retry_after_ns.saturating_add(self.retry_slack_ns);
            Rejection::new(kind, name, Some(Duration::from_nanos(wait)))
        };
        rejection.with_limits(std::mem::take(&mut permit.limits))
    }

    /// Counts and warns of a request over `rule`'s soft limit, `hard`
    /// being what its hard limit answered.
    fn soft_exceeded(&self, permit: &mut Permit, rule: &LiveRule, hard: Verdict) {
        self.metrics.decision(&rule.name, "soft_exceeded");
        permit.warnings.push(Warning {
            rule: rule.name.clone(),
            limit: rule.quota(),
            remaining: match hard {
                Verdict::Admit { remaining } => remaining,
                _ => 0,
            },
        });
    }

    pub(crate) fn status(&self, rule: &LiveRule, st: Standing) -> LimitStatus {
        LimitStatus {
            rule: rule.name.clone(),
            quota: rule.quota(),
            window: Duration::from_nanos(rule.window_ns()),
            remaining: st.remaining,
            reset: Duration::from_nanos(if st.reset_ns == 0 {
                0
            } else {
                st.reset_ns.saturating_add(self.retry_slack_ns)
            }),
        }
    }

    /// Gives back what a refused request was charged, and reports each
    /// refunded rule's standing as it is after the refund: the standing
    /// taken when the rule was charged counts a charge that no longer is.
    pub(crate) fn refund(&self, permit: &mut Permit, now: u64) {
        let delta = -i64::try_from(permit.cost).unwrap_or(i64::MAX);
        if permit.shared {
            self.settle_shared(permit, delta);
            permit.charged.clear();
            return;
        }
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
}

/// A permit charged to nothing yet, and the time it was made.
struct Blank {
    permit: Permit,
    now: u64,
}

impl Inner {
    /// The rules' decision through the Redis store: every rule's limits
    /// decided in one script call, in rule order, charging nothing if an
    /// enforced one rejects. When Redis fails (or a rule in force is not
    /// kept there), the store's [`OnError`] mode decides.
    pub(crate) async fn decide_shared(
        self: &Arc<Self>,
        head: &RequestHead<'_>,
        queue_capacity: Option<u64>,
    ) -> Result<Permit, Rejection> {
        let Some(store) = &self.store else {
            return self.decide(head, queue_capacity);
        };
        let rules = self.rules();
        if rules.iter().any(|r| r.shared.is_none()) {
            // A rule reloaded that the store cannot keep (logged on reload).
            return self.decide(head, queue_capacity);
        }
        let Blank { mut permit, .. } = self.permit(&rules, head, queue_capacity)?;
        permit.shared = true;
        // Each rule's key and its items' place, in rule order.
        let mut items = Vec::new();
        let mut keyed = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let key = match rule.key_of(head) {
                Ok(Some(key)) => key,
                Ok(None) => continue,
                Err(()) => {
                    self.metrics.decision(&rule.name, "no_key");
                    if rule.mode == Mode::Shadow {
                        continue;
                    }
                    let name = Some(rule.name.clone());
                    return Err(Rejection::new(RejectionKind::NoKey, name, None));
                }
            };
            let Some((hard, soft)) = &rule.shared else {
                continue;
            };
            let at = items.len();
            items.push(Item {
                key: store.key_name(Some(&rule.name), &key, hard, ":h"),
                params: hard.clone(),
                role: if rule.mode == Mode::Shadow {
                    Role::Shadow
                } else {
                    Role::Hard
                },
                amount: i128::from(permit.cost),
                slice: rule.slice.0,
                slice_ns: rule.slice.1,
            });
            if let Some(soft) = soft {
                items.push(Item {
                    key: store.key_name(Some(&rule.name), &key, soft, ":s"),
                    params: soft.clone(),
                    role: Role::Soft,
                    amount: i128::from(permit.cost),
                    slice: 0,
                    slice_ns: 0,
                });
            }
            keyed.push((i, key, at));
        }
        if items.is_empty() {
            return Ok(permit);
        }
        let standing = self.headers || rules.iter().any(|r| r.headers);
        // Sliced keys whose tokens this replica holds decide here; the
        // others in one call.
        let mut local = vec![None; items.len()];
        let mut spent = Vec::new();
        for (n, item) in items.iter().enumerate() {
            if item.slice > 0 {
                if let Spent::Here(answer, index) = store.spend(&item.key, permit.cost) {
                    local[n] = Some(answer);
                    spent.push((item.key.clone(), index));
                }
            }
        }
        let unspend = |spent: &[(String, u64)]| {
            for (key, index) in spent {
                store.unspend(key, *index, permit.cost);
            }
        };
        let remote: Vec<Item> = items
            .iter()
            .zip(&local)
            .filter(|(_, l)| l.is_none())
            .map(|(item, _)| item.clone())
            .collect();
        // Post-accounting lowers a key's count behind a rejection: the
        // over-limit cache is exact only without it.
        let cache = !matches!(self.cost, CostModel::Predicted { .. });
        let checked = if remote.is_empty() {
            Ok((Vec::new(), false))
        } else {
            store.check_items(&remote, standing, cache).await
        };
        let answers = match checked {
            Ok((remote_answers, hit)) => {
                if hit {
                    // The first item asked of Redis: its rule's hit.
                    let first = local.iter().position(Option::is_none);
                    if let Some((i, _, _)) = keyed.iter().find(|(_, _, at)| Some(*at) == first) {
                        self.metrics.cache_hit(&rules[*i].name);
                    }
                }
                let mut remote_answers = remote_answers.into_iter();
                let mut answers: Vec<Answer> = local
                    .into_iter()
                    .map(|l| l.or_else(|| remote_answers.next()))
                    .collect::<Option<_>>()
                    .expect("an answer per item");
                // What a replica's slice holds counts as remaining for its
                // clients, as when it spends from the slice.
                for a in &mut answers {
                    let held = a.taken.saturating_sub(permit.cost);
                    if let Some(Verdict::Admit { remaining }) = &mut a.verdict {
                        *remaining = remaining.saturating_add(held);
                    }
                    a.standing.remaining = a.standing.remaining.saturating_add(held);
                }
                answers
            }
            Err(_) => {
                unspend(&spent);
                // The link logs the error, rate-limited.
                let mode = store.on_error();
                self.metrics.store_error(match mode {
                    OnError::Allow => "allow",
                    OnError::Deny => "deny",
                    OnError::Local => "local",
                });
                return match mode {
                    OnError::Allow => {
                        permit.shared = false;
                        Ok(permit)
                    }
                    OnError::Deny => Err(Rejection::new(
                        RejectionKind::Limited,
                        None,
                        Some(Duration::from_secs(1)),
                    )),
                    OnError::Local => self.decide(head, queue_capacity),
                };
            }
        };
        let rejected = items.iter().zip(&answers).any(|(item, a)| {
            item.role == Role::Hard && a.verdict.is_some_and(|v| !v.is_admitted())
        });
        if rejected {
            // Nothing is charged: the cost goes back to the slices it
            // was spent from.
            unspend(&spent);
        }
        for (i, key, at) in keyed {
            let rule = &rules[i];
            let hard = answers[at];
            let Some(verdict) = hard.verdict else {
                break;
            };
            let shadow = rule.mode == Mode::Shadow;
            let status = (rule.headers || self.headers).then(|| {
                permit.limits.push(self.status(rule, hard.standing));
                permit.limits.len() - 1
            });
            let outcome = match verdict {
                Verdict::Reject { retry_after_ns } => {
                    let kind = if hard.banned {
                        RejectionKind::Banned
                    } else if permit.cost > rule.max_cost() {
                        RejectionKind::CostTooHigh
                    } else {
                        RejectionKind::Limited
                    };
                    self.metrics.decision(&rule.name, kind_label(kind, shadow));
                    if hard.ban_started {
                        self.metrics.decision(&rule.name, "ban_started");
                    }
                    if shadow {
                        continue;
                    }
                    // Nothing was charged: the script writes nothing then.
                    permit.charged.clear();
                    return Err(self.rejection(rule, kind, &mut permit, retry_after_ns));
                }
                Verdict::Delay { delay_ns } => {
                    permit.delay = permit.delay.max(Duration::from_nanos(delay_ns));
                    "delayed"
                }
                Verdict::Admit { .. } => "admitted",
            };
            self.metrics.decision(&rule.name, outcome);
            let mut soft_charged = false;
            if rule.soft.is_some() {
                match answers[at + 1].verdict {
                    Some(v) if v.is_admitted() => soft_charged = true,
                    _ => self.soft_exceeded(&mut permit, rule, verdict),
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

    /// Charges `delta` more (or refunds) to every key `permit` was charged
    /// to in Redis, in the background: post-accounting never rejects, and
    /// the request has its answer already.
    fn settle_shared(&self, permit: &Permit, delta: i64) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let mut items = Vec::new();
        for charge in &permit.charged {
            let rule = &permit.rules[charge.rule];
            let Some((hard, soft)) = &rule.shared else {
                continue;
            };
            items.push(Item {
                key: store.key_name(Some(&rule.name), &charge.key, hard, ":h"),
                params: hard.clone(),
                role: Role::Hard,
                amount: i128::from(delta),
                slice: 0,
                slice_ns: 0,
            });
            if let (true, Some(soft)) = (charge.soft, soft) {
                items.push(Item {
                    key: store.key_name(Some(&rule.name), &charge.key, soft, ":s"),
                    params: soft.clone(),
                    role: Role::Hard,
                    amount: i128::from(delta),
                    slice: 0,
                    slice_ns: 0,
                });
            }
        }
        if items.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("throttle store: post-accounting outside a tokio runtime is dropped");
            return;
        };
        let metrics = self.metrics.clone();
        runtime.spawn(async move {
            if store.call("settle", store.now(), &items).await.is_err() {
                metrics.store_error("settle");
            }
        });
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
        self.queue.as_ref().map(|q| q.waiting())
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
