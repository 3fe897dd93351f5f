//! Master election: which server hands out capacity.
//!
//! Only the master of a Doorman tree level answers capacity requests; the
//! others redirect clients to it. An [`Election`] publishes the current
//! [`Mastership`] on a `tokio::sync::watch` channel; the server reads it on
//! every request and resets its lease store (entering learning mode) when it
//! wins mastership. [`SingleElection`](single::SingleElection) is the
//! always-master policy for a lone server; [`EtcdElection`] elects one
//! master among many on etcd v3.
//!
#![cfg_attr(feature = "etcd", doc = "[`EtcdElection`]: etcd::Etcd")]
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdElection`]: crate#features")]

#[cfg(feature = "etcd")]
pub(super) mod etcd;
pub(super) mod single;

use std::fmt::Debug;

use tokio::sync::watch;

use tollgate_service::Readiness;

/// What a server knows about mastership at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mastership {
    /// Whether this server is the master.
    pub is_master: bool,
    /// The master's gRPC address (`host:port`), when known.
    pub master_address: Option<String>,
}

impl Mastership {
    /// This server is the master, reachable at `address`.
    pub fn master(address: Option<String>) -> Self {
        Mastership {
            is_master: true,
            master_address: address,
        }
    }

    /// Another server (at `address`, if known) is the master.
    pub fn follower(address: Option<String>) -> Self {
        Mastership {
            is_master: false,
            master_address: address,
        }
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
