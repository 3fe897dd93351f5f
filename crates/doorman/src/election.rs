//! Master election: which server hands out capacity.
//!
//! Only the master of a Doorman tree level answers capacity requests; the
//! others redirect clients to it. An [`Election`] publishes the current
//! [`Mastership`] on a `tokio::sync::watch` channel; the server reads it on
//! every request and resets its lease store (entering learning mode) when it
//! wins mastership, for as long as the election says earlier masters'
//! leases may run. [`SingleElection`](single::SingleElection) is the
//! always-master policy for a lone server, which cannot know what it granted
//! before a restart: learning mode in full. [`EtcdElection`] elects one
//! master among many on etcd v3 and bounds learning mode with a watermark
//! the masters keep beside the election (`watermark.rs`).
//!
#![cfg_attr(feature = "etcd", doc = "[`EtcdElection`]: etcd::Etcd")]
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdElection`]: crate#features")]

#[cfg(feature = "etcd")]
pub(super) mod etcd;
pub(super) mod single;
// Public to the simulator through `in_process::watermark`.
#[cfg_attr(not(feature = "in-process"), allow(unreachable_pub))]
#[cfg_attr(
    not(any(feature = "etcd", feature = "in-process", test)),
    allow(dead_code)
)]
pub(super) mod watermark;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tollgate_service::Readiness;

use crate::clock::Timestamp;

/// What a server knows about mastership at one moment.
///
/// A value with `is_master` starts a new term on the server. By default
/// the new master forgets every lease and runs learning mode for the whole
/// `learning_mode_duration` of each template: it cannot know what its
/// predecessors granted. An election that knows more says so:
///
/// * [`Mastership::learning_until`]: every lease any earlier master
///   granted has ended by then (on this server's clock, clock skew
///   included), so learning mode lasts until then at most. An empty
///   election (no master before) says a time in the past: no learning
///   mode at all.
/// * [`Mastership::keeps_leases`]: no one else was master since this
///   server's own last term, so the leases it knew then are all that is
///   outstanding: it keeps them and needs no learning mode.
/// * [`Mastership::promise`]: the master grants no lease that ends after
///   the instant the promise holds (the watermark its successor reads).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::{Mastership, Promise};
///
/// let promise = Promise::new(Duration::from_secs(1_700_000_090));
/// let m = Mastership::master(Some("a:1".into()))
///     .learning_until(Duration::from_secs(1_700_000_030))
///     .promising(promise.clone());
/// assert!(m.is_master && !m.keeps_leases);
/// assert_eq!(m.promise.unwrap().until(), Duration::from_secs(1_700_000_090));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mastership {
    /// Whether this server is the master.
    pub is_master: bool,
    /// The master's gRPC address (`host:port`), when known.
    pub master_address: Option<String>,
    /// On a new master: when every lease of an earlier master has surely
    /// ended (Unix time on this server's clock); learning mode lasts no
    /// longer. `None`: unknown, learning mode in full.
    pub learning_until: Option<Timestamp>,
    /// On a new master: no other master held the term since this server's
    /// own last one, so it keeps the leases it knew then, without learning
    /// mode.
    pub keeps_leases: bool,
    /// On a master: the latest expiry it may grant. `None`: unbounded.
    pub promise: Option<Promise>,
}

impl Mastership {
    /// This server is the master, reachable at `address`; nothing is known
    /// about earlier masters (full learning mode).
    pub fn master(address: Option<String>) -> Self {
        Mastership {
            is_master: true,
            master_address: address,
            ..Mastership::default()
        }
    }

    /// Another server (at `address`, if known) is the master.
    pub fn follower(address: Option<String>) -> Self {
        Mastership {
            is_master: false,
            master_address: address,
            ..Mastership::default()
        }
    }

    /// The same, with every earlier master's leases ended by `until`.
    #[must_use]
    pub fn learning_until(mut self, until: Timestamp) -> Self {
        self.learning_until = Some(until);
        self
    }

    /// The same, keeping the leases of this server's own last term.
    #[must_use]
    pub fn keeping_leases(mut self) -> Self {
        self.keeps_leases = true;
        self
    }

    /// The same, granting no lease that ends after `promise`'s instant.
    #[must_use]
    pub fn promising(mut self, promise: Promise) -> Self {
        self.promise = Some(promise);
        self
    }
}

/// The latest instant a master may let a lease run to: the watermark its
/// election last stored where a successor reads it. The election moves it
/// on while it can reach its store; the server reads it on every decision.
/// Clones share the instant; two promises are equal when they are the same
/// one.
#[derive(Clone)]
pub struct Promise(Arc<AtomicU64>);

impl Promise {
    /// A promise holding `until` (Unix time).
    pub fn new(until: Timestamp) -> Self {
        Promise(Arc::new(AtomicU64::new(nanos(until))))
    }

    /// The instant promised.
    pub fn until(&self) -> Timestamp {
        // Relaxed: the instant is one self-contained word; nothing else is
        // published with it.
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Moves the instant to `until` (a later or an earlier one).
    pub fn set(&self, until: Timestamp) {
        // Relaxed: as in `until`.
        self.0.store(nanos(until), Ordering::Relaxed);
    }
}

/// `t` in whole nanoseconds, saturating.
fn nanos(t: Timestamp) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

impl PartialEq for Promise {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Promise {}

impl Debug for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Promise").field(&self.until()).finish()
    }
}

/// A master election policy.
pub trait Election: Send + Sync + Debug + 'static {
    /// A receiver that always holds the latest [`Mastership`] and is notified
    /// when it changes.
    fn subscribe(&self) -> watch::Receiver<Mastership>;

    /// Whether the election can reach what it needs (etcd); a server is
    /// not ready while it cannot. Always ready by default.
    fn readiness(&self) -> Readiness {
        Readiness::default()
    }
}

impl<E: Election + ?Sized> Election for std::sync::Arc<E> {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        (**self).subscribe()
    }

    fn readiness(&self) -> Readiness {
        (**self).readiness()
    }
}
