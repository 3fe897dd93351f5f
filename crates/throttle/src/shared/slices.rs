//! Slices: tokens of a hot key that a replica takes from Redis in one call
//! and spends itself, returning what it did not use.
//!
//! # Implementation notes
//!
//! A rule with a slice of `n` takes, with a request that Redis admits, up
//! to `n` of its key's tokens (the request's cost and what else fits) in
//! the same script call. Redis counts them spent at once, in the window
//! they were taken in, so every other replica is checked against them:
//! replicas together never admit more than the limit. This replica then
//! admits requests on the key from the lease, with no Redis call, until
//! the lease runs out, its expiry passes or its window ends (a lease never
//! outlives the window it was counted in, so a request it admits counts in
//! the window it is admitted in, as it would through Redis).
//!
//! An expired lease's unused tokens go back (a `give`: the key's count
//! lowered by them, only while its latest window is still the lease's,
//! where that is exact: the window then counts what was admitted in it).
//! A background task returns expired leases every 5 ms. A request that
//! another rule rejects gives its cost back to the lease it was spent
//! from.
//!
//! This holds for the fixed window and the sliding window counter, whose
//! counts are per window. A GCRA has no window: tokens spent after they
//! were taken would let the bucket refill under them, so it keeps no
//! slices (a configuration error).
//!
//! Time is kept as the over-limit cache keeps it: the store's clock, or
//! Redis' time at the take plus the local time since the call was sent,
//! which is at least Redis' own, so a lease ends no later in Redis' time
//! than it should.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tollgate::Clock;
use tollgate_service::LockUnpoisoned;

use crate::policy::{Standing, Verdict};
use crate::rules::Limit;

use super::script::{Answer, Item};

/// One key's tokens held by this replica.
#[derive(Debug)]
struct Lease {
    /// The window the tokens were counted in.
    index: u64,
    /// Tokens not yet spent.
    left: u64,
    /// What Redis had left for everyone after the latest take.
    rest: u64,
    /// When the key would be whole again, as Redis said at the take (0:
    /// not asked).
    reset_at: u64,
    /// The lease ends: the earlier of its expiry and its window's end.
    until: u64,
    /// Redis' time at the latest take.
    from: u64,
    /// The local instant before that take's call was sent.
    sent: Instant,
    /// The key's item, to return what is left.
    item: Item,
}

/// What [`Slices::spend`] found.
#[derive(Debug)]
pub(crate) enum Spent {
    /// Spent from the lease: the answer, and the lease's window to give
    /// the cost back to if the request is rejected after all.
    Here(Answer, u64),
    /// No lease, or too few tokens in it: ask Redis.
    Ask,
}

/// The leases of one store, by Redis key name.
#[derive(Debug)]
pub(crate) struct Slices {
    clock: Option<Arc<dyn Clock>>,
    leases: Mutex<HashMap<String, Lease>>,
}

/// The window length of a limit that keeps slices.
fn window_of(limit: &Limit) -> Option<u64> {
    match limit {
        Limit::FixedWindow(p) => Some(p.window_ns),
        Limit::SlidingWindowCounter(p) => Some(p.window_ns),
        _ => None,
    }
}

impl Slices {
    pub(crate) fn new(clock: Option<Arc<dyn Clock>>) -> Slices {
        Slices {
            clock,
            leases: Mutex::new(HashMap::new()),
        }
    }

    /// Redis' time for `lease` now (at least).
    fn now(&self, lease: &Lease) -> u64 {
        match &self.clock {
            Some(c) => c.now_ns(),
            None => {
                let since = u64::try_from(lease.sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
                lease.from.saturating_add(since)
            }
        }
    }

    /// Spends `cost` of `key`'s lease, if it holds that much now.
    pub(crate) fn spend(&self, key: &str, cost: u64) -> Spent {
        let mut leases = self.leases.lock_unpoisoned();
        let Some(lease) = leases.get_mut(key) else {
            return Spent::Ask;
        };
        let now = self.now(lease);
        if now < lease.from || now >= lease.until || lease.left < cost {
            return Spent::Ask;
        }
        lease.left -= cost;
        let remaining = lease.rest.saturating_add(lease.left);
        let answer = Answer {
            verdict: Some(Verdict::Admit { remaining }),
            standing: Standing {
                remaining,
                reset_ns: lease.reset_at.saturating_sub(now),
            },
            taken: 0,
            banned: false,
            ban_started: false,
        };
        Spent::Here(answer, lease.index)
    }

    /// Gives `cost` back to `key`'s lease in window `index` (a request
    /// spent from it was rejected by another rule); lost if the lease is
    /// gone (Redis keeps it counted: never an admission too many).
    pub(crate) fn unspend(&self, key: &str, index: u64, cost: u64) {
        if let Some(lease) = self.leases.lock_unpoisoned().get_mut(key) {
            if lease.index == index {
                lease.left = lease.left.saturating_add(cost);
            }
        }
    }

    /// Keeps the tokens `answer` took for `item` (its cost spent already),
    /// at Redis' time `now`, from a call sent at `sent`.
    pub(crate) fn grant(&self, item: &Item, answer: &Answer, now: u64, sent: Instant) {
        let Some(w) = window_of(&item.params.limit) else {
            return;
        };
        let Ok(cost) = u64::try_from(item.amount) else {
            return;
        };
        let Some(Verdict::Admit { remaining: rest }) = answer.verdict else {
            return;
        };
        let index = now / w;
        let end = (index + 1).saturating_mul(w);
        let until = now.saturating_add(item.slice_ns).min(end);
        let reset_at = match answer.standing.reset_ns {
            0 => 0,
            r => now.saturating_add(r),
        };
        let left = answer.taken.saturating_sub(cost);
        let mut leases = self.leases.lock_unpoisoned();
        match leases.get_mut(&item.key) {
            Some(lease) if lease.index == index => {
                lease.left = lease.left.saturating_add(left);
                if now >= lease.from {
                    lease.rest = rest;
                    lease.reset_at = reset_at;
                    lease.until = lease.until.max(until);
                    lease.from = now;
                    lease.sent = sent;
                }
            }
            _ => {
                // A lease of an earlier window has nothing to return.
                leases.insert(
                    item.key.clone(),
                    Lease {
                        index,
                        left,
                        rest,
                        reset_at,
                        until,
                        from: now,
                        sent,
                        item: item.clone(),
                    },
                );
            }
        }
    }

    /// Takes out every lease past its end: the gives of those with tokens
    /// left (the window index in `slice`, the tokens in `amount`).
    pub(crate) fn expired(&self) -> Vec<Item> {
        let mut leases = self.leases.lock_unpoisoned();
        let mut gives = Vec::new();
        leases.retain(|_, lease| {
            let now = self.now(lease);
            if now >= lease.from && now < lease.until {
                return true;
            }
            if lease.left > 0 {
                let mut give = lease.item.clone();
                give.amount = i128::from(lease.left);
                give.slice = lease.index;
                gives.push(give);
            }
            false
        });
        gives
    }
}
