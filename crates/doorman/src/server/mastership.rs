//! Mastership: the server's view of the election, and what changes when
//! it wins or loses.
//!
//! # Implementation notes
//!
//! Mastership comes from an [`Election`](crate::Election)'s watch channel,
//! checked on every request (a shared lock and the channel's version
//! counter on the fast path). Whenever the server sees it has won
//! mastership it forgets every lease (they belong to an earlier term) and
//! starts learning mode from that instant, for the template's
//! `learning_mode_duration` or until the election's
//! [`Mastership::learning_until`], whichever comes first. When it loses
//! mastership it puts its leases aside and answers with redirects; a win
//! that [keeps them](Mastership::keeps_leases) (no one else was master
//! since) puts them back, without learning mode, and any other win drops
//! them. A master grants no lease that ends after its election's
//! [`Mastership::promise`]. A background task also follows the channel,
//! so learning mode starts when mastership is won even if no request
//! arrives.

use tokio::sync::watch;
use tracing::info;

use crate::election::Mastership;
use crate::engine::{Began, Engine, Resources};
use crate::lease::Timestamp;

/// The server's view of the election.
#[derive(Debug)]
pub(super) struct View {
    pub(super) rx: watch::Receiver<Mastership>,
    /// The last mastership seen on `rx`.
    pub(super) current: Mastership,
    /// When this server last won mastership, and until when its learning
    /// mode lasts at most; `None` while not master.
    pub(super) since: Option<Began>,
    /// The resources of this server's last term, put aside when it lost
    /// mastership, with that term, for a re-election that keeps them
    /// ([`Mastership::keeps_leases`]).
    kept: Option<(Resources, Began)>,
}

impl View {
    /// A view of `rx`, before its first value is applied.
    pub(super) fn new(rx: watch::Receiver<Mastership>) -> View {
        View {
            rx,
            current: Mastership::default(),
            since: None,
            kept: None,
        }
    }

    /// When the current term began, or, while not master, the mastership
    /// to answer with.
    pub(super) fn answer(&self) -> Result<Began, Mastership> {
        match self.since {
            Some(since) => Ok(Began {
                grant_until: self.current.promise.as_ref().map(|p| p.until()),
                ..since
            }),
            None => Err(self.current.clone()),
        }
    }

    /// Moves to mastership `m` at `now`, taking `engine`'s resources aside
    /// or back or forgetting them as the module notes say.
    pub(super) fn apply(&mut self, m: Mastership, engine: &Engine, now: Timestamp) {
        if m.is_master {
            // Only a server that still has its last term's leases can keep
            // them; any other is a new master that knows nothing. (A master
            // told again keeps its current term.)
            let last = self.since.or(self.kept.as_ref().map(|k| k.1));
            if let (true, Some(last)) = (m.keeps_leases, last) {
                // The last term's learning mode goes on as it would have:
                // its leases are all there is, but it may not have learned
                // them all yet.
                if let Some((kept, _)) = self.kept.take() {
                    engine.restore(kept);
                }
                self.since = Some(last);
                let longest = engine.snapshot().config.longest_learning_mode();
                let left = last.learning_ends(longest).saturating_sub(now);
                info!(
                    learning_for = ?left,
                    "won mastership again, no other master since: leases kept"
                );
            } else {
                self.kept = None;
                engine.forget_all();
                let since = Began {
                    at: now,
                    learning_until: m.learning_until,
                    grant_until: None,
                };
                self.since = Some(since);
                let longest = engine.snapshot().config.longest_learning_mode();
                let lasts = since.learning_ends(longest).saturating_sub(now);
                match (m.learning_until, lasts.is_zero()) {
                    (None, true) => {
                        info!("won mastership; learning mode is off (learning_mode_duration: 0)");
                    }
                    (None, false) => {
                        info!(for_up_to = ?lasts, "won mastership: learning mode starts")
                    }
                    (Some(_), true) => {
                        info!("won mastership; no learning mode: no earlier master's lease can still run");
                    }
                    (Some(_), false) => info!(
                        for_up_to = ?lasts,
                        "won mastership: learning mode starts, until earlier masters' leases have ended"
                    ),
                }
            }
        } else if let Some(since) = self.since.take() {
            self.kept = Some((engine.put_aside(), since));
            info!(master = ?m.master_address, "lost mastership");
        }
        self.current = m;
    }
}

#[cfg(test)]
mod tests;
