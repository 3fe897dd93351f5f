//! Mastership: the server's view of the election, and what changes when
//! it wins or loses.
//!
//! # Implementation notes
//!
//! Mastership comes from an [`Election`](crate::election::Election)'s
//! watch channel, checked on every request (a shared lock and the channel's
//! version counter on the fast path). Whenever the server sees it has won
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

use std::sync::Arc;

use tracing::info;

use super::state::{Began, Server, Snapshot, View};
use super::wire::{RequestLimits, Rules};
use crate::election::Mastership;
use tollgate_service::RwLockUnpoisoned;

/// What a master decides a request in: since when it has been the master
/// (learning mode runs from then) and the bounds of its term, and the
/// configuration the request is checked against and decided under.
#[derive(Debug)]
pub(super) struct Term {
    /// When mastership was won, and the term's bounds.
    pub(super) since: Began,
    /// The configuration in force when the request came.
    pub(super) snapshot: Arc<Snapshot>,
}

impl Term {
    /// The rules a request is checked against in this term.
    pub(super) fn rules<'a>(&'a self, limits: &'a RequestLimits) -> Rules<'a> {
        Rules {
            limits,
            config: &self.snapshot.config,
        }
    }
}

impl Server {
    /// The term a request is decided in, on the master; else
    /// `Err(mastership)` to send back. A follower redirects whatever it is
    /// sent, valid or not, and changes nothing.
    pub(super) fn term(&self) -> Result<Term, Mastership> {
        let since = self.mastership()?;
        Ok(Term {
            since,
            snapshot: self.snapshot(),
        })
    }

    /// The current mastership, after bringing the server's state in line
    /// with it: `Ok(the term)` on the master, else `Err(mastership)` to
    /// send back.
    ///
    /// Every new value the election publishes counts: one with `is_master`
    /// starts a new term (leases forgotten unless kept, learning mode from
    /// now), even if the server was master before, since it may have lost
    /// and regained mastership in between.
    pub(super) fn mastership(&self) -> Result<Began, Mastership> {
        {
            let view = self.inner.view.read_unpoisoned();
            if !view.rx.has_changed().unwrap_or(false) {
                return view.answer();
            }
        }
        let mut view = self.inner.view.write_unpoisoned();
        if view.rx.has_changed().unwrap_or(false) {
            let m = view.rx.borrow_and_update().clone();
            self.apply(&mut view, m);
        }
        view.answer()
    }

    /// Moves to mastership `m`. Called with the view locked for writing.
    pub(super) fn apply(&self, view: &mut View, m: Mastership) {
        if m.is_master {
            let now = self.inner.clock.now();
            // Only a server that still has its last term's leases can keep
            // them; any other is a new master that knows nothing. (A master
            // told again keeps its current term.)
            let last = view.since.or(view.kept.as_ref().map(|k| k.1));
            if let (true, Some(last)) = (m.keeps_leases, last) {
                // The last term's learning mode goes on as it would have:
                // its leases are all there is, but it may not have learned
                // them all yet.
                if let Some((kept, _)) = view.kept.take() {
                    self.restore(kept);
                }
                view.since = Some(last);
                let longest = self.snapshot().config.longest_learning_mode();
                let left = last.learning_ends(longest).saturating_sub(now);
                info!(
                    learning_for = ?left,
                    "won mastership again, no other master since: leases kept"
                );
            } else {
                view.kept = None;
                self.forget_all();
                let since = Began {
                    at: now,
                    learning_until: m.learning_until,
                    grant_until: None,
                };
                view.since = Some(since);
                let longest = self.snapshot().config.longest_learning_mode();
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
        } else {
            if let Some(since) = view.since.take() {
                view.kept = Some((self.put_aside(), since));
                info!(master = ?m.master_address, "lost mastership");
            }
        }
        view.current = m;
    }

    /// Whether this server is the master, and the master's address.
    pub fn current_mastership(&self) -> Mastership {
        let _ = self.mastership();
        self.inner.view.read_unpoisoned().current.clone()
    }
}

#[cfg(test)]
mod tests;
