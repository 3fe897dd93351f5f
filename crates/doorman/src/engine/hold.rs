//! What a parent keeps of a server client's `has`: the hold that stops it
//! from handing out capacity a cut subtree still holds.
//!
//! # Implementation notes
//!
//! When a parent cuts an intermediate server's grant, the leases that server
//! handed out under the bigger grant run on until its clients refresh; and if
//! it loses mastership first, its clients cannot learn of the cut at all and
//! keep their leases until they expire, up to a lease length later. A parent
//! that hands the freed capacity straight to others then has more out than
//! its capacity: the design doc's "shortfall", in scenario 7 of
//! `tollgate simulate` several percent over for tens of seconds.
//!
//! So an intermediate reports in its GetServerCapacity `has` the larger of
//! its lease and what its subtree holds (its own `sum_has`, holds included),
//! expiring with the latest of them (`parent.rs`), and the parent keeps what
//! that exceeds the new grant by as a [`Hold`] on the client's lease. A hold
//! counts in `sum_has`, so every algorithm's `available` leaves it to no one
//! else, while the client itself may grow back into it (its own hold counts
//! as its own). It ends when the client reports less (on its next poll, once
//! its clients have followed the cut), when its `until` passes, or with its
//! lease.
//!
//! How much of a report is believed:
//!
//! * Outside learning mode, at most what the client occupied before (its
//!   previous lease and hold), and until its previous lease ends, or the
//!   reported expiry if that is sooner. Whatever a subtree holds beyond its
//!   new grant it was granted under this server's earlier grants, and an
//!   intermediate's leases never outlive its parent's, so all of it ends by
//!   then. A client without a previous lease holds nothing of ours and gets
//!   no hold. So a client can keep no more than it was given, for no longer;
//!   and from the leaves up, what a parent counts for each child is at
//!   least what the child's subtree holds.
//! * In learning mode the report is trusted, as learning mode trusts `has`:
//!   the root's echo grants all of it anyway; an intermediate echoes only as
//!   far as its own grant reaches (`EntryState::grant`) and holds the rest.
//!
//! Only GetServerCapacity requests get holds: a plain client's new lease
//! takes effect the moment it reads the response.
//!
//! On the wire nothing changes. Go's intermediate never sends `has`, so it
//! never gets a hold and is cut at once, as before. Go's server reads `has`
//! only in learning mode, where echoing what our intermediate's subtree
//! holds is what learning mode is for.
//!
//! The price is the one the design doc names: capacity cut from one subtree
//! reaches another only once the cut subtree has followed the cut and said
//! so, about one refresh interval per level later.

use crate::lease::{ClientLease, Hold, Timestamp};

/// The hold to keep on a server client's new `lease` when it reports that
/// its subtree holds `reported` until `until`: the excess over the lease,
/// believed as the module notes say. `old` is the client's previous
/// unexpired lease's expiry and what it occupied.
pub(super) fn hold(
    reported: f64,
    until: Timestamp,
    lease: &ClientLease,
    learning: bool,
    old: Option<(Timestamp, f64)>,
    now: Timestamp,
) -> Option<Hold> {
    let (held, until) = if learning {
        (reported, until)
    } else {
        let (expiry, occupied) = old?;
        (reported.min(occupied), until.min(expiry))
    };
    let capacity = held - lease.has;
    (capacity > 0.0 && until > now).then_some(Hold { capacity, until })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::watch;

    use crate::election::{Election, Mastership};
    use crate::Server;
    use crate::ServerConfig;
    use tollgate::ManualClock;

    use crate::server::testing::{ask, at, T};

    /// 100 units shared fairly, 60 s leases; learning mode as given.
    fn root(learning: u64) -> (Server, Arc<ManualClock>) {
        let yaml = format!(
            r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {{kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: {learning}}}
"#
        );
        let clock = Arc::new({
            let clock = ManualClock::new();
            clock.advance(Duration::from_secs(T));
            clock
        });
        let election = Master(watch::Sender::new(Mastership::master(None)));
        let server = Server::builder(ServerConfig::from_yaml(&yaml).unwrap())
            .election(&election)
            .clock(clock.clone())
            .build();
        (server, clock)
    }

    #[derive(Debug)]
    struct Master(watch::Sender<Mastership>);

    impl Election for Master {
        fn subscribe(&self) -> watch::Receiver<Mastership> {
            self.0.subscribe()
        }
    }

    /// What the root counts as held: leases and holds.
    fn held(root: &Server) -> f64 {
        root.status()[0].sum_has
    }

    #[test]
    fn a_cut_subtree_keeps_what_it_holds_until_it_reports_less() {
        let (root, clock) = root(0);
        assert_eq!(ask(&root, "a", 100.0, None), 100.0);
        at(&clock, 1);
        assert_eq!(ask(&root, "b", 100.0, None), 0.0);
        // a's fair share is 50, but its subtree still holds the 100 of its
        // lease: 50 stays held for it, none goes to b.
        at(&clock, 8);
        assert_eq!(ask(&root, "a", 100.0, Some((100.0, 60))), 50.0);
        assert_eq!(held(&root), 100.0);
        at(&clock, 9);
        assert_eq!(ask(&root, "b", 100.0, None), 0.0);
        // Half way: a's subtree holds 70, so b may have 30.
        at(&clock, 16);
        assert_eq!(ask(&root, "a", 100.0, Some((70.0, 68))), 50.0);
        assert_eq!(held(&root), 70.0);
        at(&clock, 17);
        assert_eq!(ask(&root, "b", 100.0, None), 30.0);
        // Converged: b gets its fair share.
        at(&clock, 24);
        assert_eq!(ask(&root, "a", 100.0, Some((50.0, 76))), 50.0);
        assert_eq!(held(&root), 80.0);
        at(&clock, 25);
        assert_eq!(ask(&root, "b", 100.0, None), 50.0);
        assert_eq!(held(&root), 100.0);
    }

    #[test]
    fn a_report_is_held_no_further_than_the_previous_lease_and_no_longer() {
        let (root, clock) = root(0);
        assert_eq!(ask(&root, "a", 100.0, None), 100.0);
        assert_eq!(ask(&root, "b", 100.0, None), 0.0);
        // a claims 1000 until far away: held is what it had, 100, and only
        // until its lease of t = 0 ends at 60. Then a falls silent (say it
        // lost mastership).
        at(&clock, 8);
        assert_eq!(ask(&root, "a", 100.0, Some((1000.0, 1000))), 50.0);
        assert_eq!(held(&root), 100.0);
        at(&clock, 59);
        assert_eq!(ask(&root, "b", 100.0, None), 0.0);
        at(&clock, 60);
        assert_eq!(ask(&root, "b", 100.0, None), 50.0);
        // A newcomer's report is not believed at all: no lease, no hold.
        at(&clock, 61);
        assert_eq!(ask(&root, "c", 100.0, Some((30.0, 100))), 0.0);
        assert_eq!(held(&root), 100.0);
    }

    #[test]
    fn a_server_that_sends_no_has_is_cut_at_once() {
        // As Go's intermediate does.
        let (root, clock) = root(0);
        assert_eq!(ask(&root, "a", 100.0, None), 100.0);
        assert_eq!(ask(&root, "b", 100.0, None), 0.0);
        at(&clock, 8);
        assert_eq!(ask(&root, "a", 100.0, None), 50.0);
        assert_eq!(held(&root), 50.0);
        at(&clock, 9);
        assert_eq!(ask(&root, "b", 100.0, None), 50.0);
    }

    #[test]
    fn after_learning_mode_what_was_learned_is_held_until_reported_less() {
        let (root, clock) = root(10);
        // Learning mode echoes both: 120 out of 100.
        assert_eq!(ask(&root, "a", 100.0, Some((70.0, 60))), 70.0);
        assert_eq!(ask(&root, "b", 100.0, Some((50.0, 60))), 50.0);
        assert_eq!(held(&root), 120.0);
        // Learning over, both are cut: a to its fair 50; b, while a's
        // subtree still holds 70, to its 50 shrunk as the whole is over
        // the capacity (100 of 120). The rest of what their subtrees hold
        // stays held: still 120.
        at(&clock, 10);
        assert_eq!(ask(&root, "a", 100.0, Some((70.0, 60))), 50.0);
        at(&clock, 11);
        let b = 50.0 * (100.0 / 120.0);
        assert_eq!(ask(&root, "b", 100.0, Some((50.0, 60))), b);
        assert_eq!(held(&root), 120.0);
        // They report as their subtrees follow; nothing more goes out.
        at(&clock, 18);
        assert_eq!(ask(&root, "a", 100.0, Some((50.0, 70))), 50.0);
        assert_eq!(held(&root), 100.0);
        at(&clock, 19);
        assert_eq!(ask(&root, "b", 100.0, Some((b, 71))), 50.0);
        assert_eq!(held(&root), 100.0);
    }
}
