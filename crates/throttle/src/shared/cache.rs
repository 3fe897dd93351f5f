//! The over-limit cache: keys that Redis rejected for every cost, answered
//! on this replica until the time they could admit again.
//!
//! # Implementation notes
//!
//! A check that rejects a request writes nothing, so a key's state in
//! Redis changes only when some replica is admitted on it (or settles
//! post-accounting, or returns a slice). When Redis rejects the first
//! limit of a call, the script sends that key's stored state; the cache
//! keeps it only when even a cost of one is rejected then, under the
//! same policy arithmetic as the script (the in-memory policy's), until
//! `until`, the time a cost of one would be admitted. Until then no
//! replica can be admitted on the key at any cost, so the state stays as
//! it was, and every answer the cache gives (verdict, retry time, the
//! standing behind the headers) is the policy's on that state at that
//! time: the answer Redis would give. A key rejected only for a larger
//! cost is not kept: a smaller cost could be admitted meanwhile, by any
//! replica, and change what Redis would say. A cost the cached state
//! admits (zero) goes to Redis.
//!
//! What keeps that true is the throttler's: it uses the cache only where
//! nothing lowers a key's count behind a rejection (no post-accounting of
//! predicted costs, no slices returned, no Cluster refunds; see
//! `Inner::decide_shared`).
//!
//! Time: a store with its own clock reads it. Otherwise an entry keeps the
//! Redis time the script decided at and the local instant before the call
//! was sent; Redis' time now is at most that time plus the local time
//! since, which is what the cache decides at. An entry thus ends no later
//! than Redis' own `until`, and a retry time is short by at most the call's
//! round trip.
//!
//! The map holds at most `capacity` keys: when full, the entries past
//! their time are dropped, then, if none is, an arbitrary one. Losing an
//! entry costs a Redis call and changes no answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tollgate::Clock;
use tollgate_service::LockUnpoisoned;

use crate::policy::{
    FixedWindowState, GcraState, Policy, SlidingWindowCounterState, Standing, Verdict,
};
use crate::rules::Limit;

use super::script::{Answer, Item, Reply};

/// A limit and a key's state under it, as Redis holds it.
#[derive(Debug, Clone)]
enum Frozen {
    FixedWindow(crate::FixedWindow, FixedWindowState),
    SlidingWindowCounter(crate::SlidingWindowCounter, SlidingWindowCounterState),
    Gcra(crate::Gcra, GcraState),
}

impl Frozen {
    /// `limit` with the stored fields `fields`; `None` for a limit the
    /// store does not keep or fields that are not its state.
    fn of(limit: &Limit, fields: &[String; 3]) -> Option<Frozen> {
        let n = |i: usize| fields[i].parse::<u64>().ok();
        match limit {
            Limit::FixedWindow(p) => Some(Frozen::FixedWindow(
                p.clone(),
                FixedWindowState::from_parts(n(0)?, n(1)?),
            )),
            Limit::SlidingWindowCounter(p) => Some(Frozen::SlidingWindowCounter(
                p.clone(),
                SlidingWindowCounterState::from_parts(n(0)?, n(1)?, n(2)?),
            )),
            Limit::Gcra(p) => Some(Frozen::Gcra(
                p.clone(),
                GcraState::from_parts(fields[0].parse().ok()?),
            )),
            Limit::TokenPool(_) | Limit::SlidingLog(_) => None,
        }
    }

    /// The policy's verdict on a copy of the state.
    fn check(&self, now_ns: u64, cost: u64) -> Verdict {
        match self {
            Frozen::FixedWindow(p, s) => p.check(&mut s.clone(), now_ns, cost),
            Frozen::SlidingWindowCounter(p, s) => p.check(&mut s.clone(), now_ns, cost),
            Frozen::Gcra(p, s) => p.check(&mut s.clone(), now_ns, cost),
        }
    }

    fn standing(&self, now_ns: u64) -> Standing {
        match self {
            Frozen::FixedWindow(p, s) => p.standing(s, now_ns),
            Frozen::SlidingWindowCounter(p, s) => p.standing(s, now_ns),
            Frozen::Gcra(p, s) => p.standing(s, now_ns),
        }
    }
}

/// One key rejected for every cost from `from` to `until` (Redis' time).
#[derive(Debug)]
struct Entry {
    frozen: Frozen,
    from: u64,
    until: u64,
    /// The local instant before the call that rejected (no store clock).
    sent: Instant,
}

/// Redis' time for `entry` now (at most): `clock`'s, or the entry's time
/// plus the local time since its call was sent.
fn time(clock: Option<&dyn Clock>, entry: &Entry) -> u64 {
    match clock {
        Some(c) => c.now_ns(),
        None => {
            let since = u64::try_from(entry.sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
            entry.from.saturating_add(since)
        }
    }
}

/// Keys over their limit, by Redis key name.
#[derive(Debug)]
pub(crate) struct OverLimit {
    capacity: usize,
    clock: Option<Arc<dyn Clock>>,
    keys: Mutex<HashMap<String, Entry>>,
}

impl OverLimit {
    /// A cache of at most `capacity` keys (0: none), deciding at `clock`'s
    /// time if given, else at Redis' as estimated locally.
    pub(crate) fn new(capacity: usize, clock: Option<Arc<dyn Clock>>) -> OverLimit {
        OverLimit {
            capacity,
            clock,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Whether it keeps anything at all.
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Redis' time for `entry` now: at most this.
    fn now(&self, entry: &Entry) -> u64 {
        time(self.clock.as_deref(), entry)
    }

    /// The answer Redis would give a request of `cost` on `key` now, if the
    /// cache knows it: always a rejection.
    pub(crate) fn answer(&self, key: &str, cost: u64, standing: bool) -> Option<Answer> {
        let mut keys = self.keys.lock_unpoisoned();
        let entry = keys.get(key)?;
        let now = self.now(entry);
        if now < entry.from || now >= entry.until {
            keys.remove(key);
            return None;
        }
        let verdict = entry.frozen.check(now, cost);
        if verdict.is_admitted() {
            return None;
        }
        let standing = if standing {
            entry.frozen.standing(now)
        } else {
            Standing {
                remaining: 0,
                reset_ns: 0,
            }
        };
        Some(Answer {
            verdict: Some(verdict),
            standing,
            taken: 0,
            banned: false,
            ban_started: false,
        })
    }

    /// Learns from `reply`, to a call sent at `sent` whose first item is
    /// `item` (of `cost`): a rejection is kept if no cost could be admitted
    /// on the key for a while.
    pub(crate) fn learn(&self, item: &Item, cost: u64, reply: &Reply, sent: Instant) {
        let (Some(fields), Some(verdict)) = (&reply.state, reply.answers[0].verdict) else {
            return;
        };
        if !self.enabled() {
            return;
        }
        let (key, now) = (item.key.as_str(), reply.now);
        let Some(frozen) = Frozen::of(&item.params.limit, fields) else {
            return;
        };
        // The state is Redis' only if the policy agrees with the script.
        if frozen.check(now, cost) != verdict {
            return;
        }
        // Frozen while even a cost of one is rejected.
        let until = match frozen.check(now, 1) {
            Verdict::Reject { retry_after_ns } if retry_after_ns != u64::MAX => {
                now.saturating_add(retry_after_ns)
            }
            _ => return,
        };
        let entry = Entry {
            frozen,
            from: now,
            until,
            sent,
        };
        let mut keys = self.keys.lock_unpoisoned();
        if keys.len() >= self.capacity && !keys.contains_key(key) {
            let clock = self.clock.as_deref();
            keys.retain(|_, e| {
                let t = time(clock, e);
                t >= e.from && t < e.until
            });
            if keys.len() >= self.capacity {
                if let Some(any) = keys.keys().next().cloned() {
                    keys.remove(&any);
                }
            }
        }
        keys.insert(key.to_owned(), entry);
    }

    /// The keys held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock_unpoisoned().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::script::{Params, Role};
    use std::time::Duration;
    use tollgate::ManualClock;

    const S: u64 = 1_000_000_000;

    /// A reply rejecting a cost of 1 on a fixed window of 10 a second that
    /// holds 10, at 100.5 s.
    fn full(key: &str) -> (Item, Reply) {
        let limit =
            Limit::FixedWindow(crate::FixedWindow::new(10, Duration::from_secs(1)).unwrap());
        let item = Item {
            key: key.to_owned(),
            params: Params::of(&limit).unwrap(),
            role: Role::Hard,
            amount: 1,
            slice: 0,
            slice_ns: 0,
        };
        let reply = Reply {
            now: 100 * S + S / 2,
            answers: vec![Answer {
                verdict: Some(Verdict::Reject {
                    retry_after_ns: S / 2,
                }),
                standing: Standing {
                    remaining: 0,
                    reset_ns: 0,
                },
                taken: 0,
                banned: false,
                ban_started: false,
            }],
            state: Some(["100".into(), "10".into(), "0".into()]),
        };
        (item, reply)
    }

    #[test]
    fn a_full_window_is_answered_until_it_ends_then_asked_again() {
        let clock = ManualClock::new();
        clock.set_ns(100 * S + S / 2);
        let cache = OverLimit::new(4, Some(Arc::new(clock.clone())));
        let (item, reply) = full("k");
        cache.learn(&item, 1, &reply, Instant::now());
        clock.advance(Duration::from_millis(200));
        let a = cache.answer("k", 3, true).expect("known");
        assert_eq!(
            a.verdict,
            Some(Verdict::Reject {
                retry_after_ns: 300_000_000
            })
        );
        assert_eq!(
            a.standing,
            Standing {
                remaining: 0,
                reset_ns: 300_000_000
            }
        );
        clock.advance(Duration::from_millis(300));
        assert_eq!(cache.answer("k", 1, false), None);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_map_stays_within_its_capacity() {
        let clock = ManualClock::new();
        clock.set_ns(100 * S + S / 2);
        let cache = OverLimit::new(2, Some(Arc::new(clock.clone())));
        for key in ["a", "b", "c", "d"] {
            let (item, reply) = full(key);
            cache.learn(&item, 1, &reply, Instant::now());
            assert!(cache.len() <= 2);
        }
        // The latest is always kept; an evicted key is asked of Redis.
        assert!(cache.answer("d", 1, false).is_some());
        let known = ["a", "b", "c"]
            .iter()
            .filter(|k| cache.answer(k, 1, false).is_some())
            .count();
        assert_eq!(known, 1);
    }

    #[test]
    fn a_state_that_still_admits_a_cost_of_one_is_not_kept() {
        let clock = ManualClock::new();
        clock.set_ns(100 * S + S / 2);
        let cache = OverLimit::new(4, Some(Arc::new(clock.clone())));
        let (mut item, mut reply) = full("k");
        // 8 of 10 taken: a cost of 3 is rejected, a cost of 2 would pass.
        item.amount = 3;
        reply.state = Some(["100".into(), "8".into(), "0".into()]);
        cache.learn(&item, 3, &reply, Instant::now());
        assert_eq!(cache.len(), 0);
    }
}
