//! Mastership: the server's view of the election, and what changes when
//! it wins or loses.
//!
//! # Implementation notes
//!
//! Mastership comes from an [`Election`](super::super::election::Election)'s
//! watch channel, checked on every request (a shared lock and the channel's
//! version counter on the fast path). Whenever the server sees it has won
//! mastership it forgets every lease (they belong to an earlier term) and
//! starts learning mode from that instant; when it loses mastership it
//! forgets them too and answers with redirects. A background task also
//! follows the channel, so learning mode starts when mastership is won even
//! if no request arrives.

use std::sync::Arc;

use tracing::info;

use super::super::election::Mastership;
use super::super::lease::Timestamp;
use super::state::{Server, Snapshot, View};
use super::wire::{RequestLimits, Rules};
use tollgate_service::RwLockUnpoisoned;

/// What a master decides a request in: since when it has been the master
/// (learning mode runs from then), and the configuration the request is
/// checked against and decided under.
#[derive(Debug)]
pub(super) struct Term {
    /// When mastership was won.
    pub(super) since: Timestamp,
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
    /// with it: `Ok(when mastership was won)` on the master, else
    /// `Err(mastership)` to send back.
    ///
    /// Every new value the election publishes counts: one with `is_master`
    /// starts a new term (leases forgotten, learning mode from now), even if
    /// the server was master before, since it may have lost and regained
    /// mastership in between.
    pub(super) fn mastership(&self) -> Result<Timestamp, Mastership> {
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
        let was_master = view.since.is_some();
        if m.is_master {
            view.since = Some(self.inner.clock.now());
            self.forget_all();
            let longest = self.snapshot().config.longest_learning_mode();
            if longest.is_zero() {
                info!("won mastership; learning mode is off (learning_mode_duration: 0)");
            } else {
                info!(for_up_to = ?longest, "won mastership: learning mode starts");
            }
        } else {
            view.since = None;
            if was_master {
                self.forget_all();
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
