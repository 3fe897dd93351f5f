//! Counting one limit for one key: the throttler's policies and keyed
//! table, asked as the reference counts.
//!
//! # Implementation notes
//!
//! Fixed windows (the reference's, and the default) live in one
//! [`KeyedLimiter`] per unit, shared by every rule and request override of
//! that unit, keyed by the domain and the request's entries: a rule and an
//! override on the same entries count in one counter, as in the
//! reference. The throttler's [`FixedWindow`] counts each key's window
//! `[k W, (k + 1) W)` on the clock's timeline; on a Unix clock in whole
//! seconds those are the reference's windows (`now / W * W`). Each call
//! decides with a `FixedWindow` of the rule's own limit on the shared
//! state ([`KeyedLimiter::update`]). The reference counts every hit, over
//! the limit too (its `INCRBY` comes before the comparison), so a rejected
//! hit is charged after the check ([`Policy::settle`]); a check-only call
//! (`hits_addend` 0) then sees the count past the limit and answers
//! OVER_LIMIT as the reference does.
//!
//! The smooth algorithms keep a table per rule (their parameters are the
//! rule's), built on the rule's first use, and follow the throttler's
//! contract: a rejected request charges nothing.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tollgate::RateSpec;
use tollgate_throttle::{
    FixedWindow, FixedWindowState, Gcra, KeyedLimiter, Policy, SlidingWindowCounter, TokenPool,
    Verdict,
};

use super::{Algorithm, Unit};

const NS: u64 = 1_000_000_000;

/// What counting one limit gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    /// Over the limit.
    pub(crate) over: bool,
    /// Requests still admitted in the window (0 when over).
    pub(crate) remaining: u64,
    /// Whole seconds until the window ends (fixed windows) or the key holds
    /// its whole limit again (the smooth algorithms); at least 1.
    pub(crate) reset_s: u64,
    /// A fixed window's count before these hits, capped at the limit (all
    /// the per-rule statistics need: see `RateLimitService::record`);
    /// `None` where it is not known (the smooth algorithms, a count Redis
    /// refused or failed to give).
    pub(crate) before: Option<u64>,
}

/// How a count touches the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Touch {
    /// Charges the hits (the reference's normal path).
    Charge,
    /// Only asks whether charging the hits would go over; changes nothing.
    Probe,
}

/// A smooth algorithm's policy, checked when the configuration loads.
#[derive(Debug)]
pub(crate) enum Smooth {
    TokenBucket(TokenPool),
    Gcra(Gcra),
    SlidingWindow(SlidingWindowCounter),
}

impl Smooth {
    /// The policy of `algorithm` at `limit` per `unit`; `None` for the
    /// fixed window.
    ///
    /// # Errors
    ///
    /// A rate the throttler cannot count (below 0.001 per second).
    pub(crate) fn new(
        algorithm: Algorithm,
        limit: u32,
        unit: Unit,
    ) -> Result<Option<Smooth>, String> {
        let limit = u64::from(limit);
        let window = Duration::from_secs(unit.seconds());
        let rate = || {
            RateSpec::new(limit as f64 / unit.seconds() as f64).map_err(|e| {
                format!(
                    "{} at {limit} per {} is too slow to count: {e}",
                    algorithm.name(),
                    unit.name().to_lowercase()
                )
            })
        };
        let smooth = match algorithm {
            Algorithm::FixedWindow => return Ok(None),
            // A limit of 0 needs no state: it refuses everything.
            _ if limit == 0 => return Ok(None),
            Algorithm::TokenBucket => Smooth::TokenBucket(
                TokenPool::new(rate()?)
                    .with_burst(limit)
                    .map_err(|e| e.to_string())?,
            ),
            Algorithm::Gcra => {
                Smooth::Gcra(Gcra::new(rate()?, limit, 0).map_err(|e| e.to_string())?)
            }
            Algorithm::SlidingWindow => Smooth::SlidingWindow(
                SlidingWindowCounter::new(limit, window).map_err(|e| e.to_string())?,
            ),
        };
        Ok(Some(smooth))
    }
}

/// A smooth rule's table, built on first use.
#[derive(Debug, Default)]
pub(crate) struct SmoothTable(OnceLock<Arc<dyn Count>>);

/// One table of keys under one policy.
pub(crate) trait Count: Send + Sync + std::fmt::Debug {
    fn count(&self, key: &str, now_ns: u64, hits: u64, touch: Touch) -> Counted;
    /// Gives back `hits` an earlier count admitted.
    fn refund(&self, key: &str, now_ns: u64, hits: u64);
}

impl<P: Policy> Count for KeyedLimiter<P>
where
    P::State: Clone,
{
    fn count(&self, key: &str, now_ns: u64, hits: u64, touch: Touch) -> Counted {
        self.update(key, now_ns, |policy, state| {
            let verdict = match touch {
                Touch::Charge => policy.check(state, now_ns, hits),
                Touch::Probe => policy.check(&mut state.clone(), now_ns, hits),
            };
            let standing = policy.standing(state, now_ns);
            let reset_s = standing.reset_ns.div_ceil(NS).max(1);
            match verdict {
                Verdict::Admit { remaining } => Counted {
                    over: false,
                    remaining,
                    reset_s,
                    before: None,
                },
                Verdict::Delay { .. } | Verdict::Reject { .. } => Counted {
                    over: true,
                    remaining: 0,
                    reset_s,
                    before: None,
                },
            }
        })
    }

    fn refund(&self, key: &str, now_ns: u64, hits: u64) {
        self.settle(key, now_ns, -i64::try_from(hits).unwrap_or(i64::MAX));
    }
}

impl SmoothTable {
    fn get(&self, smooth: &Smooth, max_keys: usize) -> &Arc<dyn Count> {
        self.0.get_or_init(|| match smooth {
            Smooth::TokenBucket(p) => {
                Arc::new(KeyedLimiter::<_, Box<str>>::new(p.clone(), max_keys))
            }
            Smooth::Gcra(p) => Arc::new(KeyedLimiter::<_, Box<str>>::new(p.clone(), max_keys)),
            Smooth::SlidingWindow(p) => {
                Arc::new(KeyedLimiter::<_, Box<str>>::new(p.clone(), max_keys))
            }
        })
    }
}

/// Every fixed-window counter: one table per unit.
#[derive(Debug)]
pub(crate) struct Counters {
    fixed: Vec<KeyedLimiter<FixedWindow>>,
    max_keys: usize,
}

impl Counters {
    /// Tables of at most `max_keys` keys each.
    pub(crate) fn new(max_keys: usize) -> Counters {
        let fixed = Unit::ALL
            .iter()
            .map(|u| {
                // The table's own policy sets only how long a key may stay
                // idle (one window); each call brings the rule's limit.
                let window = FixedWindow::new(1, Duration::from_secs(u.seconds()))
                    .unwrap_or_else(|_| unreachable!("a unit is a valid window"));
                KeyedLimiter::new(window, max_keys)
            })
            .collect();
        Counters { fixed, max_keys }
    }

    /// Keys held, all tables together (the smooth rules' aside).
    pub(crate) fn len(&self) -> usize {
        self.fixed.iter().map(KeyedLimiter::len).sum()
    }

    /// Counts `hits` for `key` under `limit` per `unit` at `now_ns` (Unix
    /// time), with `algorithm`'s state in `table`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn count(
        &self,
        key: &str,
        limit: u32,
        unit: Unit,
        smooth: Option<(&Smooth, &SmoothTable)>,
        now_ns: u64,
        hits: u64,
        touch: Touch,
    ) -> Counted {
        let now_s = now_ns / NS;
        if limit == 0 {
            return Counted {
                over: true,
                remaining: 0,
                reset_s: unit.seconds() - now_s % unit.seconds(),
                before: Some(0),
            };
        }
        if let Some((smooth, table)) = smooth {
            return table
                .get(smooth, self.max_keys)
                .count(key, now_ns, hits, touch);
        }
        // The reference's time: whole seconds.
        let now = now_s * NS;
        let policy = FixedWindow::new(u64::from(limit), Duration::from_secs(unit.seconds()))
            .unwrap_or_else(|_| unreachable!("a limit above 0 and a unit make a valid window"));
        let (over, remaining, before) = self.fixed[unit.index()]
            .update(key, now, |_, state| fixed(&policy, state, now, hits, touch));
        Counted {
            over,
            remaining,
            reset_s: unit.seconds() - now_s % unit.seconds(),
            before: Some(before),
        }
    }
}

impl Counters {
    /// Gives back `hits` a smooth limit admitted for `key`.
    pub(crate) fn refund(
        &self,
        key: &str,
        smooth: (&Smooth, &SmoothTable),
        now_ns: u64,
        hits: u64,
    ) {
        smooth
            .1
            .get(smooth.0, self.max_keys)
            .refund(key, now_ns, hits);
    }
}

/// The reference's fixed-window count on the throttler's window: over when
/// the count after the hits passes the limit, every hit charged. Returns
/// whether over, what remains, and the count before the hits capped at the
/// limit.
fn fixed(
    policy: &FixedWindow,
    state: &mut FixedWindowState,
    now_ns: u64,
    hits: u64,
    touch: Touch,
) -> (bool, u64, u64) {
    let mut probe = *state;
    let target = match touch {
        Touch::Charge => state,
        Touch::Probe => &mut probe,
    };
    let before = policy.quota() - policy.standing(target, now_ns).remaining;
    match policy.check(target, now_ns, hits) {
        Verdict::Admit { remaining } => (false, remaining, before),
        Verdict::Delay { .. } | Verdict::Reject { .. } => {
            // At most 2^32 - 1 a call (Envoy sends at most 10^9), so that
            // no run of calls brings the count near overflow.
            policy.settle(
                target,
                now_ns,
                i64::from(u32::try_from(hits).unwrap_or(u32::MAX)),
            );
            (true, 0, before)
        }
    }
}
