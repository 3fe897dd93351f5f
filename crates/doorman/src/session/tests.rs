//! The session against a fake transport whose servers answer by address,
//! on paused tokio time: redirects (an empty master address among them),
//! the deadline, failover order and typed errors.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{MasterSession, SessionError};
use crate::pb;
use crate::transport::{Call, Transport};

const DEADLINE: Duration = Duration::from_secs(3);

/// What the server at one address does with a call.
#[derive(Debug, Clone)]
enum Answer {
    /// Answers as the master.
    Master,
    /// Redirects to this address (`""`: an empty address; `None`: no
    /// address at all).
    Redirect(Option<&'static str>),
    /// Fails with `unavailable`.
    Down,
    /// Accepts the call and never answers.
    Silent,
    /// Does not implement Discovery; answers capacity calls as the master.
    NoDiscovery,
}

/// Servers by address; every call is logged as `"rpc address"`.
#[derive(Debug, Default)]
struct Fake {
    servers: HashMap<&'static str, Answer>,
    log: Mutex<Vec<String>>,
}

impl Fake {
    fn new(servers: &[(&'static str, Answer)]) -> Arc<Fake> {
        Arc::new(Fake {
            servers: servers.iter().cloned().collect(),
            log: Mutex::new(Vec::new()),
        })
    }

    fn log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    fn answer(&self, rpc: &str, address: &str) -> Answer {
        self.log.lock().unwrap().push(format!("{rpc} {address}"));
        self.servers.get(address).cloned().unwrap_or(Answer::Down)
    }
}

fn mastership(to: Option<&str>) -> pb::Mastership {
    pb::Mastership {
        master_address: to.map(str::to_owned),
    }
}

impl Transport for Fake {
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse> {
        let r = match self.answer("discovery", address) {
            Answer::Master => Ok(pb::DiscoveryResponse {
                mastership: mastership(Some(address)),
                is_master: true,
            }),
            Answer::Redirect(to) => Ok(pb::DiscoveryResponse {
                mastership: mastership(to),
                is_master: false,
            }),
            Answer::Down => Err(tonic::Status::unavailable("down")),
            Answer::Silent => return Box::pin(std::future::pending()),
            Answer::NoDiscovery => Err(tonic::Status::unimplemented("no discovery")),
        };
        Box::pin(std::future::ready(r))
    }

    fn get_capacity(
        &self,
        address: &str,
        _: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        let r = match self.answer("get_capacity", address) {
            Answer::Master | Answer::NoDiscovery => Ok(pb::GetCapacityResponse::default()),
            Answer::Redirect(to) => Ok(pb::GetCapacityResponse {
                response: Vec::new(),
                mastership: Some(mastership(to)),
            }),
            Answer::Down => Err(tonic::Status::unavailable("down")),
            Answer::Silent => return Box::pin(std::future::pending()),
        };
        Box::pin(std::future::ready(r))
    }

    fn get_server_capacity(
        &self,
        address: &str,
        _: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        let r = match self.answer("get_server_capacity", address) {
            Answer::Master | Answer::NoDiscovery => Ok(pb::GetServerCapacityResponse::default()),
            Answer::Redirect(to) => Ok(pb::GetServerCapacityResponse {
                response: Vec::new(),
                mastership: Some(mastership(to)),
            }),
            Answer::Down => Err(tonic::Status::unavailable("down")),
            Answer::Silent => return Box::pin(std::future::pending()),
        };
        Box::pin(std::future::ready(r))
    }

    fn release_capacity(
        &self,
        address: &str,
        _: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        let r = match self.answer("release_capacity", address) {
            Answer::Down => Err(tonic::Status::unavailable("down")),
            Answer::Silent => return Box::pin(std::future::pending()),
            _ => Ok(pb::ReleaseCapacityResponse::default()),
        };
        Box::pin(std::future::ready(r))
    }

    fn forget(&self, address: &str) {
        self.log.lock().unwrap().push(format!("forget {address}"));
    }
}

fn session(fake: &Arc<Fake>, servers: &[&str]) -> MasterSession {
    MasterSession::new(
        servers.iter().map(|s| (*s).to_owned()).collect(),
        fake.clone(),
        DEADLINE,
    )
}

async fn get(s: &MasterSession) -> Result<pb::GetCapacityResponse, SessionError> {
    s.call(|t, a| t.get_capacity(a, pb::GetCapacityRequest::default()))
        .await
}

async fn get_server(s: &MasterSession) -> Result<pb::GetServerCapacityResponse, SessionError> {
    s.call(|t, a| t.get_server_capacity(a, pb::GetServerCapacityRequest::default()))
        .await
}

#[tokio::test(start_paused = true)]
async fn discovery_finds_the_master_and_a_redirect_moves_to_the_named_one() {
    let fake = Fake::new(&[
        ("a", Answer::Redirect(Some("b"))),
        ("b", Answer::Redirect(Some("c"))),
        ("c", Answer::Master),
    ]);
    let s = session(&fake, &["a"]);
    get(&s).await.unwrap();
    assert_eq!(
        fake.log(),
        ["discovery a", "get_capacity b", "get_capacity c"]
    );
    assert_eq!(s.known_master().as_deref(), Some("c"));
    // The master is remembered: the next call goes straight there.
    get(&s).await.unwrap();
    assert_eq!(fake.log(), ["get_capacity c"]);
}

#[tokio::test(start_paused = true)]
async fn a_redirect_to_an_empty_master_is_ignored_and_fails_over() {
    let fake = Fake::new(&[("a", Answer::Redirect(Some(""))), ("b", Answer::Master)]);
    let s = session(&fake, &["a", "b"]).discover(false);
    let e = get_server(&s).await.unwrap_err();
    assert_eq!(
        e,
        SessionError::NoMaster {
            address: "a".into()
        }
    );
    assert_eq!(e.to_string(), "a does not know the master");
    assert_eq!(e.address(), Some("a"));
    // The empty address was not followed: "a" was forgotten and the next
    // call asks the next configured address.
    assert_eq!(fake.log(), ["get_server_capacity a", "forget a"]);
    assert_eq!(s.known_master(), None);
    get_server(&s).await.unwrap();
    assert_eq!(fake.log(), ["get_server_capacity b"]);
}

#[tokio::test(start_paused = true)]
async fn discovery_naming_an_empty_or_no_master_fails_over() {
    let fake = Fake::new(&[
        ("a", Answer::Redirect(Some(""))),
        ("b", Answer::Redirect(None)),
        ("c", Answer::Master),
    ]);
    let s = session(&fake, &["a", "b", "c"]);
    for address in ["a", "b"] {
        assert_eq!(
            get(&s).await.unwrap_err(),
            SessionError::NoMaster {
                address: address.into()
            }
        );
    }
    get(&s).await.unwrap();
    assert_eq!(
        fake.log(),
        [
            "discovery a",
            "forget a",
            "discovery b",
            "forget b",
            "discovery c",
            "get_capacity c"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_costs_exactly_the_deadline_then_the_next_address_is_tried() {
    let fake = Fake::new(&[("a", Answer::Silent), ("b", Answer::Master)]);
    let s = session(&fake, &["a", "b"]).discover(false);
    let start = Instant::now();
    let e = get(&s).await.unwrap_err();
    assert_eq!(start.elapsed(), DEADLINE);
    assert_eq!(
        e,
        SessionError::Deadline {
            address: "a".into(),
            deadline: DEADLINE
        }
    );
    assert_eq!(e.to_string(), "a: deadline exceeded");
    assert!(e.source().is_none());
    get(&s).await.unwrap();
    assert_eq!(start.elapsed(), DEADLINE);
    assert_eq!(fake.log(), ["get_capacity a", "forget a", "get_capacity b"]);
}

#[tokio::test(start_paused = true)]
async fn failover_goes_round_the_configured_addresses_in_order() {
    let fake = Fake::new(&[("c", Answer::Master)]);
    let s = session(&fake, &["a", "b", "c"]).discover(false);
    let mut failed = Vec::new();
    for _ in 0..2 {
        let e = get(&s).await.unwrap_err();
        failed.push(e.address().unwrap().to_owned());
    }
    assert_eq!(failed, ["a", "b"]);
    get(&s).await.unwrap();
    assert_eq!(s.known_master().as_deref(), Some("c"));
    assert_eq!(
        fake.log(),
        [
            "get_capacity a",
            "forget a",
            "get_capacity b",
            "forget b",
            "get_capacity c"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_master_learnt_from_a_redirect_is_forgotten_for_the_configured_address() {
    let fake = Fake::new(&[("a", Answer::Redirect(Some("m"))), ("m", Answer::Down)]);
    let s = session(&fake, &["a", "b"]).discover(false);
    let e = get(&s).await.unwrap_err();
    assert_eq!(e.address(), Some("m"));
    assert_eq!(e.to_string(), "m: Unavailable: down");
    let status = e.source().unwrap().downcast_ref::<tonic::Status>().unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // "m" was not a configured address: the next call starts from "a"
    // again rather than skipping to "b".
    assert_eq!(s.known_master(), None);
    let _ = get(&s).await;
    assert_eq!(
        fake.log(),
        [
            "get_capacity a",
            "get_capacity m",
            "forget m",
            "get_capacity a",
            "get_capacity m",
            "forget m"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn redirects_past_the_limit_fail_the_call_and_forget_the_master() {
    let fake = Fake::new(&[
        ("a", Answer::Redirect(Some("b"))),
        ("b", Answer::Redirect(Some("a"))),
    ]);
    let s = session(&fake, &["a"]).discover(false).max_redirects(2);
    let e = get(&s).await.unwrap_err();
    assert_eq!(e, SessionError::Redirects { limit: 2 });
    assert_eq!(e.to_string(), "too many mastership redirects");
    assert_eq!(
        fake.log(),
        ["get_capacity a", "get_capacity b", "get_capacity a"]
    );
    assert_eq!(s.known_master(), None);
}

#[tokio::test(start_paused = true)]
async fn a_server_without_discovery_is_taken_as_the_master() {
    let fake = Fake::new(&[("a", Answer::NoDiscovery)]);
    let s = session(&fake, &["a"]);
    get(&s).await.unwrap();
    assert_eq!(fake.log(), ["discovery a", "get_capacity a"]);
}

#[tokio::test(start_paused = true)]
async fn send_ignores_mastership_and_a_failure_fails_over() {
    let fake = Fake::new(&[("a", Answer::Down), ("b", Answer::Master)]);
    let s = session(&fake, &["a", "b"]).discover(false);
    let release =
        |t: &dyn Transport, a: &str| t.release_capacity(a, pb::ReleaseCapacityRequest::default());
    let e = s.send(release).await.unwrap_err();
    assert_eq!(e.address(), Some("a"));
    s.send(release).await.unwrap();
    assert_eq!(
        fake.log(),
        ["release_capacity a", "forget a", "release_capacity b"]
    );
}

#[tokio::test(start_paused = true)]
async fn no_configured_address_is_an_error_not_a_panic() {
    let fake = Fake::new(&[]);
    let s = session(&fake, &[]);
    assert_eq!(get(&s).await.unwrap_err(), SessionError::NoServers);
    s.fail("a");
    assert!(fake.log().iter().all(|l| l.starts_with("forget")));
}

#[test]
fn a_release_error_leads_through_the_session_error_to_the_status() {
    use crate::ReleaseError;
    let e = ReleaseError::Unreachable(SessionError::Rpc {
        address: "a".into(),
        status: tonic::Status::unavailable("down"),
    });
    assert_eq!(
        e.to_string(),
        "release not acknowledged: a: Unavailable: down"
    );
    let session = e.source().unwrap().downcast_ref::<SessionError>().unwrap();
    assert_eq!(session.address(), Some("a"));
    let status = session.source().unwrap().downcast_ref::<tonic::Status>();
    assert_eq!(
        status.map(tonic::Status::code),
        Some(tonic::Code::Unavailable)
    );
    assert!(ReleaseError::Closed.source().is_none());
}
