//! Counting in a Redis store: every replica of `tollgate rls` on one
//! Redis answers as one.
//!
//! # Implementation notes
//!
//! The counting is the throttler's [`RedisStore`]: the same policies in
//! the same script as the throttler's shared limits, one script call for
//! every limit of every descriptor of a request (on a Redis Cluster, one
//! per hash slot: each counter key is its own hash tag, so a busy domain
//! spreads over the Cluster rather than landing on one node), each limit
//! decided on its own as the in-memory path decides it.
//!
//! A fixed window is the throttler's [`FixedWindow`] of one unit with a
//! limit no call reaches ([`UNBOUNDED`]): it admits and charges every hit,
//! as the reference's `INCRBY` does, and the count after the call is
//! `UNBOUNDED - remaining`; the rule's own limit is compared here. Every
//! rule and override of one unit on the same entries so count in one
//! Redis key, as they count in one in-memory counter. Its windows are the
//! script's `[k W, (k + 1) W)` on Redis' `TIME` (Unix time), the
//! reference's `now / W * W`, and the seconds until the reset come from
//! the time the script decided at. A call's hits are charged up to
//! 2^32 - 1, as in memory.
//!
//! The smooth algorithms (GCRA, sliding window) are the throttler's
//! policies of the rule; their keys also carry the rule's place in the
//! configuration, since each rule keeps its own state. A probe (the
//! `stop incrementing when over limit` pass) is a check of cost 0: over
//! when the hits exceed what remains.
//!
//! The store's over-limit cache answers a smooth limit that Redis
//! rejected for every cost, with no Redis call, until the time it could
//! admit again: the answer Redis would give, since no replica can be
//! admitted on the key meanwhile. Only a limit alone on its descriptor:
//! one beside others may be refunded (`finish` gives back what it
//! admitted when another refused), which would let Redis admit before
//! that time. A fixed window is never rejected in Redis (its limit is
//! compared here, and every hit counts), so it always asks Redis.

use std::time::Duration;

use tollgate_throttle::{FixedWindow, Limit, OnError, RedisStore, Standing, StoreError, Verdict};

use super::counter::{Counted, Smooth, Touch};
use super::job::Job;
use super::Unit;

const NS: u64 = 1_000_000_000;

/// The fixed window's limit in Redis: above any count a window reaches
/// (at most 2^32 - 1 hits a call), and 14 digits, which keeps the
/// script's one-item calls on its fast path.
const UNBOUNDED: u64 = 99_999_999_999_999;

/// A Redis store and the fixed windows of every unit.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    store: RedisStore,
    fixed: Vec<Limit>,
}

impl Shared {
    pub(crate) fn new(store: RedisStore) -> Shared {
        let fixed = Unit::ALL
            .iter()
            .map(|u| {
                FixedWindow::new(UNBOUNDED, Duration::from_secs(u.seconds()))
                    .map(Limit::FixedWindow)
                    .unwrap_or_else(|_| unreachable!("a unit is a valid window"))
            })
            .collect();
        Shared { store, fixed }
    }

    pub(crate) fn store(&self) -> &RedisStore {
        &self.store
    }

    pub(crate) fn on_error(&self) -> OnError {
        self.store.on_error()
    }

    pub(crate) fn replicas(&self) -> u32 {
        self.store.replicas()
    }

    /// The limit and Redis key of `job`; `None` for a limit of 0, which
    /// refuses without counting.
    fn target(&self, job: &Job<'_>) -> Option<(Limit, String)> {
        let rule = job.rule;
        let unit = rule.unit?;
        if rule.requests_per_unit == 0 {
            return None;
        }
        Some(match &rule.smooth {
            None => (self.fixed[unit.index()].clone(), job.key.clone()),
            Some(smooth) => {
                let limit = match smooth {
                    Smooth::Gcra(p) => Limit::Gcra(p.clone()),
                    Smooth::SlidingWindow(p) => Limit::SlidingWindowCounter(p.clone()),
                    // Refused at load; the store refuses it too.
                    Smooth::TokenBucket(p) => Limit::TokenPool(p.clone()),
                };
                (limit, format!("{}|{}", job.key, rule.path))
            }
        })
    }

    /// Counts `jobs` in one script call. Returns the counts and the time
    /// they were counted at (`now_ns` when nothing needed Redis). A smooth
    /// limit `alone` on its descriptor (never refunded) is answered by the
    /// store's over-limit cache while Redis would reject it at any cost.
    ///
    /// # Errors
    ///
    /// Redis' error, or no answer within the store's deadline: nothing is
    /// known counted.
    pub(crate) async fn count(
        &self,
        jobs: &[Job<'_>],
        alone: &[bool],
        touch: Touch,
        now_ns: u64,
    ) -> Result<(Vec<Counted>, u64), StoreError> {
        let targets: Vec<Option<(Limit, String)>> = jobs.iter().map(|j| self.target(j)).collect();
        let mut checks = Vec::with_capacity(jobs.len());
        let mut cached = Vec::with_capacity(jobs.len());
        for ((job, target), &alone) in jobs.iter().zip(&targets).zip(alone) {
            if let Some((limit, key)) = target {
                // A fixed window is never rejected in Redis (its limit is
                // compared here): only a smooth limit is cached.
                cached.push(alone && job.rule.smooth.is_some());
                let cost = match touch {
                    Touch::Charge if job.rule.smooth.is_none() => job.hits.min(u64::from(u32::MAX)),
                    Touch::Charge => job.hits,
                    Touch::Probe => 0,
                };
                checks.push((limit, key.as_str(), cost));
            }
        }
        let (now_ns, answers) = if checks.is_empty() {
            (now_ns, Vec::new())
        } else {
            self.store.check_each_cached(&checks, &cached).await?
        };
        let now_s = now_ns / NS;
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(jobs.len());
        for (job, target) in jobs.iter().zip(&targets) {
            let unit = job
                .rule
                .unit
                .unwrap_or_else(|| unreachable!("a counted limit has a unit"));
            let window_reset = unit.seconds() - now_s % unit.seconds();
            if target.is_none() {
                out.push(Counted {
                    over: true,
                    remaining: 0,
                    reset_s: window_reset,
                    before: None,
                });
                continue;
            }
            let Some((verdict, standing)) = answers.next() else {
                unreachable!("the store answers every check")
            };
            out.push(match job.rule.smooth {
                None => fixed(job, touch, verdict, window_reset),
                Some(_) => smooth(job, touch, verdict, standing),
            });
        }
        Ok((out, now_ns))
    }

    /// Gives back the hits of `jobs` (smooth limits that admitted them) at
    /// `now_ns`; a refund Redis loses leaves the charge.
    pub(crate) async fn refund(&self, jobs: &[Job<'_>], now_ns: u64) {
        for job in jobs {
            if let Some((limit, key)) = self.target(job) {
                let delta = -i64::try_from(job.hits).unwrap_or(i64::MAX);
                let _ = self.store.settle_at(&limit, &key, now_ns, delta).await;
            }
        }
    }
}

/// A fixed window's count: the script admitted `cost` under
/// [`UNBOUNDED`] (or refused, a count past it: over any rule's limit).
fn fixed(job: &Job<'_>, touch: Touch, verdict: Verdict, reset_s: u64) -> Counted {
    let limit = u64::from(job.rule.requests_per_unit);
    let Verdict::Admit { remaining } = verdict else {
        return Counted {
            over: true,
            remaining: 0,
            reset_s,
            before: None,
        };
    };
    let count = UNBOUNDED - remaining.min(UNBOUNDED);
    // A probe charged nothing: where the hits would take the count.
    let after = match touch {
        Touch::Charge => count,
        Touch::Probe => count.saturating_add(job.hits),
    };
    let before = Some(after.saturating_sub(job.hits).min(limit));
    if after > limit {
        return Counted {
            over: true,
            remaining: 0,
            reset_s,
            before,
        };
    }
    Counted {
        over: false,
        remaining: limit - after,
        reset_s,
        before,
    }
}

/// A smooth limit's count, as the in-memory table counts it.
fn smooth(job: &Job<'_>, touch: Touch, verdict: Verdict, standing: Standing) -> Counted {
    let reset_s = standing.reset_ns.div_ceil(NS).max(1);
    let remaining = match verdict {
        Verdict::Admit { remaining } => Some(remaining),
        Verdict::Delay { .. } | Verdict::Reject { .. } => None,
    };
    let remaining = match touch {
        Touch::Charge => remaining,
        Touch::Probe => remaining.and_then(|r| r.checked_sub(job.hits)),
    };
    match remaining {
        Some(remaining) => Counted {
            over: false,
            remaining,
            reset_s,
            before: None,
        },
        None => Counted {
            over: true,
            remaining: 0,
            reset_s,
            before: None,
        },
    }
}
