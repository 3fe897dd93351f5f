//! Where tollgate answers differently from envoyproxy/ratelimit on
//! purpose: one test per row of the README's table (the rows on loading
//! are in `rls_config.rs` and the command's tests), and one input no
//! answer may break on.

mod common;

use std::sync::Arc;

use common::*;
use tollgate::ManualClock;
use tollgate_rls::pb::rate_limit_response::rate_limit::Unit;
use tollgate_rls::pb::rate_limit_response::Code;
use tollgate_rls::{Descriptor, RateLimitService, Request, RlsConfig, RlsSettings};

const EDGE: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: blocked\n    rate_limit: {unit: minute, requests_per_unit: 0}\n";

/// The reference reads unit 0 as a window length and panics, which ends
/// its process; tollgate refuses the call.
#[tokio::test]
async fn a_limit_override_with_unit_unknown_is_invalid_argument() {
    let mut s = Server::start(Some(EDGE), RlsSettings::default()).await;
    let e = s
        .call("edge", vec![d(&[("a", "b")]), dl(&[("a", "b")], 5, 0)], 0)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            tonic::Code::InvalidArgument,
            "descriptor 1: the limit override's unit 0 is not one of SECOND (1) to WEEK (7)"
        )
    );
    // The server still answers.
    assert_eq!(
        s.ok("edge", vec![d(&[("a", "b")])], 0).await.overall_code,
        Code::Ok as i32
    );
}

/// The reference's counter key holds the entries and the window's start
/// but no unit, so at an hour boundary a minute rule and an hour override
/// on the same entries count in one counter; tollgate keeps one per unit.
#[tokio::test]
async fn units_never_share_a_counter() {
    let mut s = Server::start(Some(EDGE), RlsSettings::default()).await;
    // T is 840 s past an hour: go back to the boundary.
    s.clock.set_ns((T - 840) * 1_000_000_000);
    let ip = [("remote_address", "1.1.1.1")];
    assert_eq!(
        s.ok("edge", vec![d(&ip)], 0).await.statuses,
        vec![ok((3, Unit::Minute, ""), 2, 60)]
    );
    // The reference: 5 - 2 = 3 (the minute's hit counted too).
    assert_eq!(
        s.ok("edge", vec![dl(&ip, 5, Unit::Hour as i32)], 0)
            .await
            .statuses,
        vec![ok((5, Unit::Hour, ""), 4, 3600)]
    );
}

/// The reference answers a check-only call (hits_addend 0) under a limit
/// of 0 OK while the key's counter is 0; tollgate refuses every call.
#[tokio::test]
async fn a_zero_limit_refuses_check_only_calls_too() {
    let mut s = Server::start(Some(EDGE), RlsSettings::default()).await;
    let r = s.ok("edge", vec![dh(&[("blocked", "x")], 0)], 0).await;
    assert_eq!(
        (r.overall_code, r.statuses),
        (
            Code::OverLimit as i32,
            vec![over((0, Unit::Minute, ""), 60)]
        )
    );
}

/// The reference keeps its counters in Redis, shared by its replicas and
/// expired by TTL; tollgate keeps them in the process, at most `max_keys`
/// per unit: past that the least recently used keys are forgotten and
/// start afresh.
#[test]
fn counters_are_bounded_by_max_keys() {
    let clock = ManualClock::new();
    clock.set_ns(T * 1_000_000_000);
    let settings = RlsSettings {
        max_keys: 16,
        ..RlsSettings::default()
    };
    let config = RlsConfig::from_yaml("c.yaml", EDGE).unwrap();
    let s = RateLimitService::new(Some(config), settings, Arc::new(clock.clone()));
    let call = |ip: &str| {
        s.should_rate_limit(&Request {
            domain: "edge".into(),
            descriptors: vec![Descriptor::new([("remote_address", ip)])],
            hits_addend: 0,
        })
        .unwrap()
        .statuses[0]
            .limit_remaining
    };
    assert_eq!([call("first"), call("first"), call("first")], [2, 1, 0]);
    // Sixteen more, each used a second after the one before (in the
    // same minute).
    for i in 0..16 {
        clock.advance(std::time::Duration::from_secs(1));
        call(&format!("10.0.0.{i}"));
    }
    assert_eq!(s.keys(), 15);
    // The oldest key went first: it counts from zero again.
    assert_eq!(call("first"), 2);
}

/// Huge hits_addends (Envoy sends at most 10^9; any client may send
/// 2^64 - 1) never overflow a count: still over, and a check-only call
/// or a call of one hit after them too.
#[tokio::test]
async fn huge_hits_addends_stay_over_the_limit() {
    let mut s = Server::start(Some(EDGE), RlsSettings::default()).await;
    let ip = [("remote_address", "9.9.9.9")];
    for _ in 0..3 {
        let r = s.ok("edge", vec![dh(&ip, u64::MAX)], 0).await;
        assert_eq!(r.statuses, vec![over((3, Unit::Minute, ""), 60)]);
    }
    for hits in [0, 1] {
        let r = s.ok("edge", vec![dh(&ip, hits)], 0).await;
        assert_eq!(r.statuses, vec![over((3, Unit::Minute, ""), 60)]);
    }
}
