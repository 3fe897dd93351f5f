//! Ways a hostile or careless client could get past a limit, each closed:
//! debt that outlives eviction, costs no queue or rule can hold, abandoned
//! queue places, requests without a usable key, client-asserted
//! criticality and unbounded key bytes. All on a manual clock.

use std::time::Duration;

use axum::http::Request;
use tollgate::throttle::{CostModel, Extract, Limit, RequestHead, Rule, Throttler, TokenPool};
use tollgate::ManualClock;

/// A request for `path` with API key `key`.
fn keyed(path: &str, key: &str) -> Request<()> {
    Request::builder()
        .uri(path)
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

#[test]
fn an_idle_key_in_debt_is_kept_until_its_debt_is_repaid() {
    // 1/s; both keys' first request is predicted at 1 and really costs 100.
    let clock = ManualClock::new();
    let t = Throttler::builder()
        .clock(clock.clone())
        .cost(CostModel::Predicted {
            class: Extract::method_and_path(),
            default: 1,
        })
        .rule(Rule::new(
            "key",
            Extract::header("x-api-key"),
            Limit::TokenPool(TokenPool::new("1".parse().unwrap())),
        ))
        .build();
    for key in ["a", "b"] {
        // Each its own class, so neither is predicted from the other.
        let r = keyed(&format!("/heavy/{key}"), key);
        t.check(&RequestHead::of(&r)).unwrap().finish(100);
    }
    // Ten seconds on, each still owes about 89 s of schedule; a sweep must
    // not forgive it, so both keys are refused alike.
    clock.advance(Duration::from_secs(10));
    let a = t
        .check(&RequestHead::of(&keyed("/light", "a")))
        .unwrap_err();
    t.sweep();
    let b = t
        .check(&RequestHead::of(&keyed("/light", "b")))
        .unwrap_err();
    assert_eq!(a, b);
    let after = a.retry_after().unwrap();
    assert!(after > Duration::from_secs(88), "{after:?}");
    // Once repaid, the key is idle like any other and may go.
    clock.advance(after + Duration::from_secs(5));
    t.sweep();
    assert!(t.check(&RequestHead::of(&keyed("/light", "b"))).is_ok());
}
