//! The unit tests of `parent.rs`.

use super::*;
use crate::algorithm::Kind;
use crate::Server;
use crate::ServerConfig;

use crate::server::testing::{ask, at, T};

fn upstream(decay_factor: f64) -> ParentLink {
    ParentLink::new(
        Parent {
            address: "parent:1".into(),
            server_id: "mid".into(),
            decay_factor,
        },
        Arc::new(crate::transport::Grpc::with_tls(DEADLINE, None)),
    )
}

fn grant(capacity: f64, expiry: u64, refresh: i64) -> pb::GetServerCapacityResponse {
    pb::GetServerCapacityResponse {
        response: vec![pb::ServerCapacityResourceResponse {
            resource_id: "r".into(),
            gets: pb::Lease {
                expiry_time: expiry as i64,
                refresh_interval: refresh,
                capacity,
            },
            algorithm: Some(pb::Algorithm::from(&AlgorithmConfig::new(
                Kind::ProportionalShare,
                Duration::from_secs(60),
                Duration::from_secs(refresh as u64),
            ))),
            safe_capacity: None,
        }],
        mastership: None,
    }
}

#[test]
fn a_grant_becomes_the_capacity_with_the_parents_algorithm_and_a_capped_lease() {
    let config = ServerConfig::builtin();
    let template = config.find("r").unwrap();
    let u = upstream(0.5);
    let at = |s: u64| Duration::from_secs(T + s);
    assert_eq!(u.effective("r", template, at(0)).1, 0.0, "no grant yet");
    assert_eq!(u.record(grant(40.0, T + 30, 8)), Duration::from_secs(8));
    let (algo, capacity) = u.effective("r", template, at(10));
    assert_eq!(capacity, 40.0);
    assert_eq!(algo.kind, Kind::ProportionalShare);
    assert_eq!(algo.lease_length, Duration::from_secs(20), "ends with ours");
    assert_eq!(algo.refresh_interval, Duration::from_secs(4), "8 s halved");
    let has = pb::Lease::from(u.has("r", at(10), 0.0, None).unwrap());
    assert_eq!((has.capacity, has.expiry_time), (40.0, (T + 30) as i64));
    assert_eq!(u.effective("r", template, at(30)).1, 0.0, "expired");
    assert!(u.has("r", at(30), 0.0, None).is_none());
}

#[test]
fn has_is_the_larger_of_the_lease_and_what_the_subtree_holds() {
    let u = upstream(0.5);
    let at = |s: u64| Duration::from_secs(T + s);
    let lease = |capacity: f64, expiry: u64, refresh: u64| Lease {
        capacity,
        expiry: Duration::from_secs(T + expiry),
        refresh_interval: Duration::from_secs(refresh),
    };
    assert_eq!(
        u.has("r", at(0), 5.0, Some(at(20))),
        Some(lease(5.0, 20, 0))
    );
    assert_eq!(u.has("r", at(0), 5.0, Some(at(0))), None, "all ended");
    u.record(grant(40.0, T + 30, 8));
    assert_eq!(u.has("r", at(10), 0.0, None), Some(lease(40.0, 30, 8)));
    assert_eq!(
        u.has("r", at(10), 10.0, Some(at(30))),
        Some(lease(40.0, 30, 8))
    );
    assert_eq!(
        u.has("r", at(10), 55.0, Some(at(25))),
        Some(lease(55.0, 30, 8))
    );
}

/// An election switched by hand.
#[derive(Debug)]
struct Switch(tokio::sync::watch::Sender<crate::election::Mastership>);

impl crate::election::Election for Switch {
    fn subscribe(&self) -> tokio::sync::watch::Receiver<crate::election::Mastership> {
        self.0.subscribe()
    }
}

impl Switch {
    fn master() -> Switch {
        Switch(tokio::sync::watch::Sender::new(
            crate::election::Mastership::master(None),
        ))
    }

    /// Loses mastership and wins it again: a new term.
    fn reelect(&self, server: &Server) {
        use crate::election::Mastership;
        self.0.send_replace(Mastership::follower(None));
        self.0.send_replace(Mastership::master(None));
        let _ = server.current_mastership();
    }
}

/// A root of 100 units without learning mode, and an intermediate with
/// 10 s of it, on one manual clock at `T`.
fn tree() -> (
    Server,
    Server,
    Switch,
    std::sync::Arc<tollgate::ManualClock>,
) {
    tree_learning(10)
}

/// As [`tree`], with `learning` seconds of learning mode on the
/// intermediate.
fn tree_learning(
    learning: u64,
) -> (
    Server,
    Server,
    Switch,
    std::sync::Arc<tollgate::ManualClock>,
) {
    tree_with(0, learning)
}

/// As [`tree`], with `root_learning` and `learning` seconds of
/// learning mode on the root and the intermediate.
fn tree_with(
    root_learning: u64,
    learning: u64,
) -> (
    Server,
    Server,
    Switch,
    std::sync::Arc<tollgate::ManualClock>,
) {
    use tollgate::ManualClock;
    let clock = std::sync::Arc::new({
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(T));
        clock
    });
    let yaml = |capacity, learning| {
        format!(
            r#"
resources:
  - identifier_glob: "*"
    capacity: {capacity}
    algorithm: {{kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: {learning}}}
"#
        )
    };
    let root = Server::builder(ServerConfig::from_yaml(&yaml(100, root_learning)).unwrap())
        .election(&Switch::master())
        .clock(clock.clone())
        .build();
    let switch = Switch::master();
    let mid = Server::builder(ServerConfig::from_yaml(&yaml(0, learning)).unwrap())
        .election(&switch)
        .clock(clock.clone())
        .parent(Parent {
            address: String::new(),
            server_id: "mid".into(),
            decay_factor: 0.5,
        })
        .build();
    (root, mid, switch, clock)
}

/// One poll of `root` by `mid`, in-process; returns the `has` sent.
fn poll(mid: &Server, root: &Server) -> Option<pb::Lease> {
    poll_and_wait(mid, root).0
}

/// One poll of `root` by `mid`; returns the `has` sent and how long
/// the poller waits before the next.
fn poll_and_wait(mid: &Server, root: &Server) -> (Option<pb::Lease>, Duration) {
    let upstream = mid.upstream_link().unwrap();
    let resource = wire::to_server_resources(mid.upstream_requests(upstream, mid.now()));
    let has = resource.first().and_then(|r| r.has);
    let response = root
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: "mid".into(),
            resource,
        })
        .unwrap();
    (has, upstream.record(response))
}

/// Client `id` asks `server` for `wants`, saying it has `has`.
fn get(server: &Server, id: &str, wants: f64, has: Option<f64>) -> f64 {
    let response = server
        .get_capacity(pb::GetCapacityRequest {
            client_id: id.into(),
            resource: vec![pb::ResourceRequest {
                resource_id: "r".into(),
                priority: 0,
                has: has.map(|capacity| pb::Lease {
                    expiry_time: 0,
                    refresh_interval: 0,
                    capacity,
                }),
                wants,
            }],
        })
        .unwrap();
    response.response[0].gets.capacity
}

fn held(server: &Server) -> f64 {
    server.status()[0].sum_has
}

fn sent(has: Option<pb::Lease>) -> (f64, u64) {
    let has = has.expect("a has is sent");
    (has.capacity, has.expiry_time as u64 - T)
}

#[test]
fn a_cut_intermediate_reports_what_its_clients_hold_even_across_a_new_term() {
    let (root, mid, switch, clock) = tree();
    at(&clock, 10);
    assert_eq!(get(&mid, "c1", 60.0, None), 0.0, "no grant yet");
    assert_eq!(
        poll(&mid, &root),
        Some(pb::Lease::default()),
        "nothing held"
    );
    assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
    at(&clock, 11);
    assert_eq!(ask(&root, "other", 100.0, None), 40.0);
    // The root cuts mid to its fair 50 while c1 holds 60: 10 stays
    // held for mid, and other still gets only 40.
    at(&clock, 18);
    assert_eq!(sent(poll(&mid, &root)), (60.0, 70));
    assert_eq!(held(&root), 100.0);
    at(&clock, 19);
    assert_eq!(ask(&root, "other", 100.0, None), 40.0);
    // mid starts a new term before telling c1: it forgot c1, but still
    // reports the 60 it reported before, so the root still holds 10.
    at(&clock, 20);
    switch.reelect(&mid);
    assert_eq!(sent(poll(&mid, &root)), (60.0, 78));
    assert_eq!(held(&root), 100.0);
    at(&clock, 21);
    assert_eq!(ask(&root, "other", 100.0, None), 40.0);
    // c1 comes back: learning mode echoes its 60 only up to the 50
    // granted.
    assert_eq!(get(&mid, "c1", 60.0, Some(60.0)), 50.0);
    at(&clock, 26);
    assert_eq!(sent(poll(&mid, &root)), (60.0, 80), "still learning");
    // Learning over, mid reports what c1 holds; other gets its share.
    at(&clock, 30);
    assert_eq!(sent(poll(&mid, &root)), (50.0, 86));
    assert_eq!(held(&root), 90.0);
    at(&clock, 31);
    assert_eq!(ask(&root, "other", 100.0, None), 50.0);
}

#[test]
fn a_new_term_reports_what_was_held_until_the_grant_that_answered_it_ends() {
    let (root, mid, switch, clock) = tree_learning(60);
    at(&clock, 70);
    assert_eq!(get(&mid, "c1", 60.0, None), 0.0, "no grant yet");
    assert_eq!(poll(&mid, &root), Some(pb::Lease::default()));
    assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
    // mid reports c1's 60 until 130; the grant that answers lasts until
    // 138, and c1 renews under it.
    at(&clock, 78);
    assert_eq!(sent(poll(&mid, &root)), (60.0, 130));
    at(&clock, 79);
    assert_eq!(get(&mid, "c1", 60.0, Some(60.0)), 60.0);
    // A new term forgets c1, which does not come back. The root cuts
    // mid to 50 for "other" and holds 10 of c1's 60.
    at(&clock, 80);
    switch.reelect(&mid);
    at(&clock, 81);
    assert_eq!(ask(&root, "other", 100.0, None), 40.0);
    at(&clock, 86);
    assert_eq!(sent(poll(&mid, &root)), (60.0, 138));
    assert_eq!(held(&root), 100.0);
    // After what mid reported before the term ran out (130), but while
    // the grant that answered it lasts (138), mid still reports 60.
    at(&clock, 132);
    assert_eq!(sent(poll(&mid, &root)).0, 60.0);
    assert_eq!(held(&root), 100.0);
    assert_eq!(ask(&root, "other", 100.0, Some((40.0, 141))), 40.0);
    // Then no longer.
    at(&clock, 139);
    assert_eq!(sent(poll(&mid, &root)).0, 50.0);
    assert_eq!(ask(&root, "other", 100.0, Some((40.0, 141))), 50.0);
}

#[test]
fn a_cut_passed_down_is_reported_up_until_the_child_follows() {
    let (root, mid, _switch, clock) = tree();
    at(&clock, 10);
    assert_eq!(ask(&mid, "dc", 80.0, None), 0.0);
    poll(&mid, &root);
    assert_eq!(ask(&mid, "dc", 80.0, None), 80.0);
    assert_eq!(ask(&root, "other", 100.0, None), 20.0);
    // The root cuts mid to 50, and mid cuts dc, whose clients still
    // hold 80: mid holds 30 for dc and reports 80, not its lease of 50,
    // so the root keeps holding 30 for mid.
    at(&clock, 18);
    assert_eq!(sent(poll(&mid, &root)), (80.0, 70));
    at(&clock, 19);
    assert_eq!(ask(&mid, "dc", 80.0, Some((80.0, 70))), 50.0);
    assert_eq!(held(&mid), 80.0);
    at(&clock, 26);
    assert_eq!(sent(poll(&mid, &root)), (80.0, 78));
    assert_eq!(held(&root), 100.0);
    assert_eq!(ask(&root, "other", 100.0, None), 20.0);
    // dc's clients follow; so does the root.
    at(&clock, 27);
    assert_eq!(ask(&mid, "dc", 80.0, Some((50.0, 78))), 50.0);
    at(&clock, 34);
    assert_eq!(sent(poll(&mid, &root)), (50.0, 86));
    assert_eq!(held(&root), 70.0);
    assert_eq!(ask(&root, "other", 100.0, None), 50.0);
}

#[test]
fn an_intermediate_in_learning_mode_holds_what_a_child_server_reports_beyond_its_grant() {
    let (root, mid, switch, clock) = tree();
    at(&clock, 10);
    assert_eq!(ask(&mid, "dc", 80.0, None), 0.0);
    poll(&mid, &root);
    assert_eq!(ask(&mid, "dc", 80.0, None), 80.0);
    assert_eq!(ask(&root, "other", 100.0, None), 20.0);
    at(&clock, 18);
    assert_eq!(sent(poll(&mid, &root)), (80.0, 70));
    assert_eq!(held(&root), 100.0, "mid cut to 50, 30 held");
    // A new term at mid: dc says its subtree holds 80; mid echoes the
    // 50 it has and holds the other 30, and so reports 80 upwards.
    at(&clock, 20);
    switch.reelect(&mid);
    assert_eq!(ask(&mid, "dc", 80.0, Some((80.0, 70))), 50.0);
    assert_eq!(held(&mid), 80.0);
    assert_eq!(sent(poll(&mid, &root)), (80.0, 78));
    assert_eq!(held(&root), 100.0);
    // dc follows the cut; after learning mode mid reports 50.
    at(&clock, 30);
    assert_eq!(ask(&mid, "dc", 80.0, Some((50.0, 78))), 50.0);
    assert_eq!(held(&mid), 50.0);
    assert_eq!(sent(poll(&mid, &root)), (50.0, 80));
    assert_eq!(held(&root), 70.0);
}

#[test]
fn a_parents_echo_of_a_partial_request_does_not_bound_a_new_master() {
    // A whole tree of new masters (after an etcd outage): the root and
    // mid both in learning mode, mid with nothing from before.
    let (root, mid, _switch, clock) = tree_with(60, 60);
    at(&clock, 10);
    assert_eq!(
        get(&mid, "c1", 40.0, Some(30.0)),
        30.0,
        "no grant: whole echo"
    );
    assert_eq!(sent(poll(&mid, &root)).0, 30.0);
    assert_eq!(held(&root), 30.0, "the root echoed c1's part");
    // c2 comes back with the 30 it held. The grant of 30 only echoed
    // what mid said; it bounds nothing, and c2 gets its 30 back.
    at(&clock, 11);
    assert_eq!(get(&mid, "c2", 40.0, Some(30.0)), 30.0);
    assert_eq!(sent(poll(&mid, &root)).0, 60.0);
    assert_eq!(held(&root), 60.0);
    // Once mid reports no more than its grant, the echo says what the
    // root holds for it, and bounds: a client claiming more than is
    // left gets what is left.
    at(&clock, 12);
    assert_eq!(sent(poll(&mid, &root)).0, 60.0);
    assert_eq!(get(&mid, "c3", 40.0, Some(10.0)), 0.0);
}

#[test]
fn a_new_master_asks_again_once_the_rest_of_its_clients_are_back() {
    // A whole tree of new masters (after an etcd outage): mid asks the
    // root, in learning mode too, with the sums of the clients back so
    // far. It hands its clients 4 s (the root's 8 s halved), so the
    // others are back 4 s later: it asks again then, not after the
    // root's 8 s, and the root knows what the whole subtree wants
    // before its own learning mode ends and it divides the capacity.
    let (root, mid, _switch, clock) = tree_with(60, 60);
    let secs = Duration::from_secs;
    at(&clock, 10);
    assert_eq!(get(&mid, "c1", 40.0, Some(30.0)), 30.0);
    let (has, wait) = poll_and_wait(&mid, &root);
    assert_eq!((sent(has).0, wait), (30.0, secs(4)));
    at(&clock, 14);
    assert_eq!(get(&mid, "c2", 40.0, Some(30.0)), 30.0);
    let (has, wait) = poll_and_wait(&mid, &root);
    assert_eq!((sent(has).0, wait), (60.0, secs(4)));
    let wants = |root: &Server| {
        let lease = root.leases("r").unwrap()[0].1;
        (lease.wants, lease.subclients)
    };
    assert_eq!(wants(&root), (80.0, 2));
    // Learning mode over, mid's sums are whole: the root's interval.
    at(&clock, 60);
    let (_, wait) = poll_and_wait(&mid, &root);
    assert_eq!(wait, secs(8));
}

#[test]
fn a_master_again_long_after_its_last_term_does_not_ask_as_it_did_then() {
    // After its learning mode, mid asks for c1's 60 and is granted it
    // until 121 s; it loses mastership, and wins again at 200 s with an
    // empty state, when only c2 (wanting 20, holding 10) is back.
    let (root, mid, switch, clock) = tree_learning(60);
    at(&clock, 61);
    assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 0.0);
    poll(&mid, &root);
    assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
    at(&clock, 200);
    switch.reelect(&mid);
    assert_eq!(get(&mid, "c2", 20.0, Some(10.0)), 10.0);
    // What mid asked in its last term, and was granted, ended at 121 s:
    // it asks with c2's sums, not c1's 60 of then.
    poll(&mid, &root);
    let lease = root.leases("r").unwrap()[0].1;
    assert_eq!((lease.wants, lease.subclients), (20.0, 1));
}

#[test]
fn refresh_intervals_decay_to_whole_seconds_of_at_least_one() {
    let u = upstream(0.5);
    assert_eq!(u.decayed(Duration::from_secs(1)), Duration::from_secs(1));
    assert_eq!(u.decayed(Duration::from_secs(5)), Duration::from_secs(3));
    let u = upstream(1.0);
    assert_eq!(u.decayed(Duration::from_secs(16)), Duration::from_secs(16));
}
