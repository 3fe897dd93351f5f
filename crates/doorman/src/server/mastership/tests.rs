//! Learning mode as the election bounds it, on a manual clock: each rule,
//! learning mode in full where the rule's condition does not hold, and a
//! property test over random failure timelines.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::election::watermark::{self, Found, Record};
use crate::election::{Election, Mastership, Promise};
use crate::server::testing::{at, T};
use crate::Server;
use crate::{pb, ServerConfig, WallClock as _};
use tollgate::ManualClock;

/// 100 units shared fairly, 60 s leases refreshed every 8 s, 60 s of
/// learning mode.
const CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 60}
"#;

#[derive(Debug)]
struct Switch(watch::Sender<Mastership>);

impl Election for Switch {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.0.subscribe()
    }
}

fn clock() -> Arc<ManualClock> {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(T));
    Arc::new(clock)
}

/// A server on `clock`, following `switch`.
fn server(switch: &Switch, clock: &Arc<ManualClock>) -> Server {
    Server::builder(ServerConfig::from_yaml(CONFIG).unwrap())
        .election(switch)
        .clock(clock.clone())
        .build()
}

fn switch(m: Mastership) -> Switch {
    Switch(watch::Sender::new(m))
}

/// What `id` gets asking for `wants` with `has` (capacity, expiry in
/// seconds after `T`): (capacity, expiry in seconds after `T`, refresh
/// interval in seconds).
fn ask(server: &Server, id: &str, wants: f64, has: Option<(f64, u64)>) -> (f64, u64, i64) {
    let response = server
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: id.into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: "r".into(),
                has: has.map(|(capacity, expiry)| pb::Lease {
                    expiry_time: (T + expiry) as i64,
                    refresh_interval: 8,
                    capacity,
                }),
                wants: vec![pb::PriorityBandAggregate {
                    priority: 0,
                    num_clients: 1,
                    wants,
                }],
            }],
        })
        .unwrap();
    let gets = &response.response[0].gets;
    (
        gets.capacity,
        (gets.expiry_time as u64).saturating_sub(T),
        gets.refresh_interval,
    )
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(T + s)
}

#[test]
fn without_a_bound_learning_mode_lasts_in_full() {
    let clock = clock();
    at(&clock, 10);
    let s = server(&switch(Mastership::master(None)), &clock);
    // Learning mode echoes what a client holds, for 60 s from the win.
    assert_eq!(ask(&s, "a", 100.0, Some((30.0, 40))).0, 30.0);
    at(&clock, 69);
    assert!(s.status()[0].learning);
    assert_eq!(ask(&s, "b", 100.0, None).0, 0.0);
    at(&clock, 70);
    assert!(!s.status()[0].learning);
}

#[test]
fn learning_mode_ends_when_the_predecessor_s_leases_have() {
    let clock = clock();
    at(&clock, 10);
    let s = server(
        &switch(Mastership::master(None).learning_until(secs(25))),
        &clock,
    );
    assert_eq!(ask(&s, "a", 30.0, Some((30.0, 40))), (30.0, 70, 8));
    at(&clock, 24);
    assert!(s.status()[0].learning);
    assert_eq!(ask(&s, "b", 100.0, None).0, 0.0);
    // At 25 s, not at 70 s: the algorithm divides the capacity.
    at(&clock, 25);
    assert!(!s.status()[0].learning);
    assert_eq!(ask(&s, "b", 100.0, None).0, 70.0);
}

#[test]
fn a_client_short_of_its_wants_is_asked_back_when_the_bound_ends() {
    let clock = clock();
    let s = server(
        &switch(Mastership::master(None).learning_until(secs(3))),
        &clock,
    );
    // Asked back after 3 s, when learning mode ends, not after 8.
    assert_eq!(ask(&s, "a", 100.0, Some((30.0, 40))), (30.0, 60, 3));
}

#[test]
fn a_bound_past_the_learning_mode_does_not_lengthen_it() {
    let clock = clock();
    let s = server(
        &switch(Mastership::master(None).learning_until(secs(500))),
        &clock,
    );
    at(&clock, 59);
    assert!(s.status().is_empty() || s.status()[0].learning);
    assert_eq!(ask(&s, "a", 100.0, None).0, 0.0);
    at(&clock, 60);
    assert_eq!(ask(&s, "a", 100.0, None).0, 100.0);
}

#[test]
fn the_first_master_of_an_empty_election_needs_no_learning_mode() {
    let clock = clock();
    let s = server(
        &switch(Mastership::master(None).learning_until(Duration::ZERO)),
        &clock,
    );
    assert_eq!(ask(&s, "a", 100.0, None).0, 100.0);
    assert!(!s.status()[0].learning);
}

#[test]
fn a_master_re_elected_with_no_one_in_between_keeps_its_leases() {
    let clock = clock();
    let election = switch(Mastership::master(None).learning_until(Duration::ZERO));
    let s = server(&election, &clock);
    assert_eq!(ask(&s, "a", 60.0, None).0, 60.0);
    election.0.send_replace(Mastership::follower(None));
    at(&clock, 20);
    assert!(s.current_mastership().is_master.eq(&false));
    election
        .0
        .send_replace(Mastership::master(None).keeping_leases());
    // No learning mode, and a's 60 still counts: b gets the other 40.
    assert_eq!(ask(&s, "b", 100.0, None).0, 40.0);
    assert!(!s.status()[0].learning);
    // a's lease, granted before the loss, ends at 60 s.
    at(&clock, 60);
    assert_eq!(ask(&s, "b", 100.0, None).0, 100.0);
}

#[test]
fn a_re_election_that_does_not_keep_the_leases_learns_in_full() {
    let clock = clock();
    let election = switch(Mastership::master(None).learning_until(Duration::ZERO));
    let s = server(&election, &clock);
    assert_eq!(ask(&s, "a", 60.0, None).0, 60.0);
    election.0.send_replace(Mastership::follower(None));
    at(&clock, 20);
    election.0.send_replace(Mastership::master(None));
    assert!(s.current_mastership().is_master);
    assert!(s.status().is_empty());
    assert_eq!(ask(&s, "b", 100.0, None).0, 0.0);
    assert!(s.status()[0].learning);
}

#[test]
fn a_re_election_that_keeps_the_leases_learns_on_as_the_last_term_would_have() {
    let clock = clock();
    let election = switch(Mastership::master(None));
    let s = server(&election, &clock);
    // Learning mode of the first term, until 60 s: a client unknown to
    // this server may hold up to all of the capacity.
    at(&clock, 10);
    election.0.send_replace(Mastership::follower(None));
    assert!(!s.current_mastership().is_master);
    at(&clock, 20);
    election
        .0
        .send_replace(Mastership::master(None).keeping_leases());
    assert_eq!(ask(&s, "a", 100.0, None).0, 0.0);
    at(&clock, 59);
    assert!(s.status()[0].learning);
    at(&clock, 60);
    assert!(!s.status()[0].learning);
}

#[test]
fn a_server_that_never_was_master_cannot_keep_leases() {
    let clock = clock();
    let s = server(&switch(Mastership::master(None).keeping_leases()), &clock);
    assert_eq!(ask(&s, "a", 100.0, None).0, 0.0);
    at(&clock, 59);
    assert!(s.status()[0].learning);
}

#[test]
fn no_lease_outlives_the_promise() {
    let clock = clock();
    let promise = Promise::new(secs(30));
    let s = server(
        &switch(
            Mastership::master(None)
                .learning_until(Duration::ZERO)
                .promising(promise.clone()),
        ),
        &clock,
    );
    assert_eq!(ask(&s, "a", 50.0, None), (50.0, 30, 8));
    at(&clock, 26);
    assert_eq!(ask(&s, "a", 50.0, Some((50.0, 30))), (50.0, 30, 4));
    // Renewed: full leases again.
    promise.set(secs(100));
    assert_eq!(ask(&s, "a", 50.0, Some((50.0, 30))), (50.0, 86, 8));
}

/// One step of a failure timeline.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Wait(u64),
    /// Client `c` refreshes with the master, wanting `wants`.
    Refresh(usize, u8),
    /// The master loses mastership (its election lease lapsed).
    Lose,
    /// A live candidate wins, if there is no master.
    Elect(usize),
    /// The store becomes unreachable, or reachable again.
    Store(bool),
    /// Server `i` restarts with empty state (losing mastership).
    Restart(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (1u64..20).prop_map(Step::Wait),
        10 => (0usize..4, 0u8..100).prop_map(|(c, w)| Step::Refresh(c, w)),
        2 => Just(Step::Lose),
        3 => (0usize..3).prop_map(Step::Elect),
        2 => proptest::bool::ANY.prop_map(Step::Store),
        1 => (0usize..3).prop_map(Step::Restart),
    ]
}

/// Three servers electing on a model of the store: the watermark rules as
/// the etcd election follows them, on one clock.
struct Timeline {
    clock: Arc<ManualClock>,
    switches: Vec<Switch>,
    servers: Vec<Server>,
    /// Each server's identity and the revision of its last write.
    ids: Vec<(u64, Option<i64>)>,
    next_id: u64,
    /// The stored watermark and the revision of its last write.
    record: Option<(Record, i64)>,
    revision: i64,
    master: Option<(usize, Promise)>,
    reachable: bool,
    /// When the store last answered the master (seconds after `T`).
    answered: u64,
    /// Each client's lease: (capacity, expiry in seconds after `T`).
    leases: Vec<Option<(f64, u64)>>,
}

/// Leases of 60 s, an election TTL of 10 s; the watermark is only 62 s
/// ahead, less than a lease and a TTL, so that the promise cuts the leases
/// of a master that cannot reach the store.
const AHEAD: Duration = Duration::from_secs(62);

impl Timeline {
    fn new() -> Timeline {
        let clock = clock();
        let switches: Vec<Switch> = (0..3).map(|_| switch(Mastership::follower(None))).collect();
        let servers = switches.iter().map(|s| server(s, &clock)).collect();
        Timeline {
            clock,
            switches,
            servers,
            ids: (0..3).map(|i| (i, None)).collect(),
            next_id: 3,
            record: None,
            revision: 0,
            master: None,
            reachable: true,
            answered: 0,
            leases: vec![None; 4],
        }
    }

    fn now(&self) -> u64 {
        (self.clock.now() - Duration::from_secs(T)).as_secs()
    }

    fn found(&self) -> Found {
        match self.record {
            None => Found::Empty,
            Some((r, rev)) => Found::Record(r, rev),
        }
    }

    /// The master stores its watermark, if the store is reachable.
    fn write(&mut self, m: usize, promise: &Promise) {
        if !self.reachable {
            return;
        }
        self.answered = self.now();
        let until = watermark::next(self.found(), self.clock.now(), AHEAD);
        self.revision += 1;
        self.record = Some((
            Record {
                until,
                writer: self.ids[m].0,
            },
            self.revision,
        ));
        self.ids[m].1 = Some(self.revision);
        promise.set(until);
    }

    fn lose(&mut self) {
        if self.master.take().is_some() {
            for s in &self.switches {
                s.0.send_replace(Mastership::follower(None));
            }
        }
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Wait(s) => {
                self.clock.advance(Duration::from_secs(s));
                if let Some((m, promise)) = self.master.clone() {
                    self.write(m, &promise);
                }
                // A master the store has not answered for an election TTL
                // (10 s) is master no more.
                if self.master.is_some() && self.now() >= self.answered + 10 {
                    self.lose();
                }
            }
            Step::Refresh(c, wants) => {
                let Some((m, _)) = &self.master else { return };
                let now = self.now();
                let has = self.leases[c].filter(|&(_, expiry)| expiry > now);
                let (capacity, expiry, _) =
                    ask(&self.servers[*m], &format!("c{c}"), wants.into(), has);
                self.leases[c] = Some((capacity, expiry));
            }
            Step::Lose => self.lose(),
            Step::Elect(i) => {
                if self.master.is_some() || !self.reachable {
                    return;
                }
                let (me, last) = self.ids[i];
                let won = watermark::won(None, self.found(), me, last, Duration::from_secs(1));
                // The watermark is stored before the first grant.
                let promise = Promise::new(Duration::ZERO);
                self.write(i, &promise);
                self.master = Some((i, promise.clone()));
                for (j, s) in self.switches.iter().enumerate() {
                    s.0.send_replace(if j == i {
                        won.clone().promising(promise.clone())
                    } else {
                        Mastership::follower(None)
                    });
                }
                let _ = self.servers[i].current_mastership();
            }
            Step::Store(reachable) => self.reachable = reachable,
            Step::Restart(i) => {
                if self.master.as_ref().is_some_and(|(m, _)| *m == i) {
                    self.lose();
                }
                self.switches[i] = switch(Mastership::follower(None));
                self.servers[i] = server(&self.switches[i], &self.clock);
                self.ids[i] = (self.next_id, None);
                self.next_id += 1;
            }
        }
    }

    /// What the clients hold now.
    fn held(&self) -> f64 {
        let now = self.now();
        self.leases
            .iter()
            .flatten()
            .filter(|&&(_, expiry)| expiry > now)
            .map(|&(capacity, _)| capacity)
            .sum()
    }
}

/// The timeline the promise is for: a master that cannot reach the store
/// grants until its election lease lapses; its successor learns only until
/// the last watermark stored.
#[test]
fn a_master_cut_off_from_the_store_grants_nothing_past_its_promise() {
    let mut timeline = Timeline::new();
    for step in [
        Step::Elect(0),
        Step::Refresh(0, 50),
        Step::Wait(1),
        Step::Store(false),
        Step::Wait(8),
        // Granted at 9 s, 63 s is the last watermark stored (1 s + 62 s).
        Step::Refresh(1, 50),
    ] {
        timeline.step(step);
    }
    assert_eq!(timeline.leases[1], Some((50.0, 63)));
    for step in [
        Step::Wait(2),
        Step::Store(true),
        Step::Elect(1),
        Step::Wait(53),
        Step::Refresh(2, 100),
    ] {
        timeline.step(step);
    }
    // Learning mode ended at 64 s: all 100 go to client 2.
    assert_eq!(timeline.now(), 64);
    assert_eq!(timeline.leases[2], Some((100.0, 124)));
    assert_eq!(timeline.held(), 100.0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Whatever the timeline of lost masters, elections, restarts and
    /// store outages, what the clients hold never exceeds the capacity.
    #[test]
    fn what_the_clients_hold_never_exceeds_the_capacity(
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let mut timeline = Timeline::new();
        for step in steps {
            timeline.step(step.clone());
            let held = timeline.held();
            proptest::prop_assert!(held <= 100.0 + 1e-9, "{held} after {step:?}");
        }
    }
}
