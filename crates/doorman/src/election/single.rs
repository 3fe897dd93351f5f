//! The single-node election: this server is always the master.

use tokio::sync::watch;

use super::{Election, Mastership};

/// A lone server that is always the master.
///
/// # Examples
///
/// ```
/// use tollgate_doorman::{Election, SingleElection};
///
/// let election = SingleElection::new(Some("127.0.0.1:15000".to_owned()));
/// assert!(election.subscribe().borrow().is_master);
/// ```
#[derive(Debug)]
pub struct SingleElection {
    tx: watch::Sender<Mastership>,
}

impl SingleElection {
    /// Always master; `address` is what Discovery reports as the master's
    /// address.
    pub fn new(address: Option<String>) -> Self {
        SingleElection {
            tx: watch::Sender::new(Mastership::master(address)),
        }
    }
}

impl Election for SingleElection {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.tx.subscribe()
    }
}
