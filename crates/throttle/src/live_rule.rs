//! A rule in force: its limits' keyed state (in memory, or its script
//! parameters under a Redis store that keeps them), and how it finds a
//! request's key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::rules::{stored_key, Extract, Found, MissingKey, Mode, RequestHead, Rule};
use super::rules::{RuleKey, SHARED_KEY};
use super::shared::{Params, RedisStore};
use super::store::Keyed;

/// A rule with its keyed state.
#[derive(Debug)]
pub(crate) struct LiveRule {
    /// The rule's identity, to recognise it on reload.
    pub(crate) id: RuleKey,
    pub(crate) name: Arc<str>,
    pub(crate) key: Extract,
    pub(crate) hard: Box<dyn Keyed>,
    pub(crate) soft: Option<Box<dyn Keyed>>,
    pub(crate) ban_ns: Option<u64>,
    pub(crate) mode: Mode,
    pub(crate) missing_key: MissingKey,
    pub(crate) headers: bool,
    /// The hard and soft limits' script parameters, under a Redis store
    /// that keeps them (the in-memory limits are then the fallback, per
    /// replica).
    pub(crate) shared: Option<(Params, Option<Params>)>,
    /// The slice a replica takes of a key and how long it may spend it,
    /// in nanoseconds (0 tokens: none).
    pub(crate) slice: (u64, u64),
    /// The hard limit's quota, most cost and window, as shared (the
    /// in-memory fallback's are per replica).
    limits: (u64, u64, u64),
    /// Whether the extractor's unavailability was logged.
    logged: AtomicBool,
}

impl LiveRule {
    /// The rule with its keyed state: in memory, or in `store` if it keeps
    /// every limit of the rule (see [`LiveRule::shared`]).
    pub(crate) fn new(rule: Rule, clock_step: Duration, store: Option<&RedisStore>) -> LiveRule {
        let id = rule.key();
        let shared = store.and_then(|_| {
            // A limit or a slice the store cannot keep exactly.
            RedisStore::supports_rule(&rule).ok()?;
            let hard = Params::of(&rule.hard).ok()?.with_ban(rule.ban);
            let soft = match &rule.soft {
                Some(s) => Some(Params::of(s).ok()?),
                None => None,
            };
            Some((hard, soft))
        });
        let replicas = store.map_or(1, RedisStore::replicas);
        let shared_facts = rule.hard.facts();
        let (hard, soft) = match store {
            Some(_) => (
                rule.hard.per_replica(replicas),
                rule.soft.map(|s| s.per_replica(replicas)),
            ),
            None => (rule.hard, rule.soft),
        };
        let hard = hard.keyed(rule.max_keys, clock_step);
        let limits = match shared {
            Some(_) => shared_facts,
            None => (hard.quota(), hard.max_cost(), hard.window_ns()),
        };
        LiveRule {
            id,
            name: rule.name,
            key: rule.key,
            hard,
            soft: soft.map(|s| s.keyed(rule.max_keys, clock_step)),
            ban_ns: rule
                .ban
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            mode: rule.mode,
            missing_key: rule.missing_key,
            headers: rule.headers,
            slice: (
                rule.slice,
                u64::try_from(rule.slice_expiry.as_nanos()).unwrap_or(u64::MAX),
            ),
            shared,
            limits,
            logged: AtomicBool::new(false),
        }
    }

    /// The hard limit's quota (as shared by replicas).
    pub(crate) fn quota(&self) -> u64 {
        self.limits.0
    }

    /// The most cost the hard limit ever admits (as shared by replicas).
    pub(crate) fn max_cost(&self) -> u64 {
        self.limits.1
    }

    /// The hard limit's window (as shared by replicas).
    pub(crate) fn window_ns(&self) -> u64 {
        self.limits.2
    }

    /// The key `head` is counted under, or `None` when the request is not
    /// subject to the rule (`Err` when the rule rejects it for having no
    /// key). Keys are bounded in bytes ([`stored_key`]).
    pub(crate) fn key_of(&self, head: &RequestHead<'_>) -> Result<Option<String>, ()> {
        match self.key.find(head) {
            Found::Key(k) => return Ok(Some(stored_key(k))),
            Found::Empty if self.missing_key != MissingKey::Reject => {
                return Ok(Some(String::new()))
            }
            Found::Empty | Found::Missing => {}
            Found::Unavailable(why) => {
                // Relaxed: a flag for one log line; a race logs it twice.
                if !self.logged.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        rule = %self.name,
                        missing_key = ?self.missing_key,
                        "throttle rule \"{}\" can find no key: {why}; \
                         requests are handled as having none",
                        self.name
                    );
                }
            }
        }
        match self.missing_key {
            MissingKey::Shared => Ok(Some(SHARED_KEY.to_owned())),
            MissingKey::Skip => Ok(None),
            MissingKey::Reject => Err(()),
        }
    }
}
