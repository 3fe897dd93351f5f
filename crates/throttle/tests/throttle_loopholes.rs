//! Ways a hostile or careless client could get past a limit, each closed:
//! debt that outlives eviction, costs no queue or rule can hold, abandoned
//! queue places, requests without a usable key, client-asserted
//! criticality and unbounded key bytes. All on a manual clock.

#[path = "common/gathered.rs"]
mod common_gathered;
use common_gathered::gathered;
use std::time::Duration;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::http::{HeaderValue, Request};
use tollgate::{ManualClock, RateSpec};
use tollgate_throttle::{
    CostModel, Criticality, Extract, FixedWindow, Limit, MissingKey, PeerAddr, RejectionKind,
    RequestHead, Rule, Throttler, TokenPool, Trust,
};

use tollgate_testkit::logs::Logs;

/// Polls a future once: its output if ready, `None` if it would wait (the
/// future is then dropped, as a client closing its connection drops it).
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}

/// A request declaring its cost.
fn costing(cost: &str) -> Request<()> {
    Request::builder().header("x-cost", cost).body(()).unwrap()
}

/// A throttler with a queue of 10 units released at 100 per second, costs
/// read from `x-cost`.
fn queued(clock: &ManualClock) -> Throttler {
    Throttler::builder()
        .clock(clock.clone())
        .cost(CostModel::Header {
            name: "x-cost".into(),
            default: 1,
        })
        .queue(10, RateSpec::new(100.0).unwrap())
        .build()
}

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

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_queue_capacity_is_refused_busy_or_idle() {
    let clock = ManualClock::new();
    let t = queued(&clock);
    for cost in ["500", "18446744073709551615", "11"] {
        let err = poll_once(t.admit(&RequestHead::of(&costing(cost))))
            .expect("refused at once")
            .unwrap_err();
        assert_eq!(err.kind(), RejectionKind::CostTooHigh);
        assert_eq!(err.http_status(), 413);
        assert_eq!(err.retry_after(), None);
        assert_eq!(
            err.to_string(),
            format!("cost {cost} exceeds the admission queue's capacity (10)")
        );
    }
    // Nothing was scheduled: the idle queue lets the next request through
    // at once, and a full one (10 units) too.
    assert!(poll_once(t.admit(&RequestHead::of(&costing("1"))))
        .expect("passes at once")
        .is_ok());
    clock.advance(Duration::from_millis(10));
    assert!(poll_once(t.admit(&RequestHead::of(&costing("10"))))
        .expect("passes at once")
        .is_ok());
    // Busy now: still refused at once, not queued.
    let err = poll_once(t.admit(&RequestHead::of(&costing("11"))))
        .expect("refused at once")
        .unwrap_err();
    assert_eq!(err.kind(), RejectionKind::CostTooHigh);
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_queued_request_leaves_the_queue_at_once() {
    let clock = ManualClock::new();
    let t = queued(&clock);
    assert!(poll_once(t.admit(&RequestHead::of(&costing("1"))))
        .unwrap()
        .is_ok());
    // Two clients queue (5 units each, filling the queue) and hang up.
    for _ in 0..2 {
        assert!(poll_once(t.admit(&RequestHead::of(&costing("5")))).is_none());
    }
    // Their places are free: a live request queues instead of a 503.
    let r = costing("5");
    let head = RequestHead::of(&r);
    let mut live = pin!(t.admit(&head));
    assert!(futures_pending(live.as_mut()));
    let text = gathered(t.registry());
    assert!(
        text.contains("tollgate_throttle_queued_requests 1"),
        "{text}"
    );
    assert!(text.contains("tollgate_throttle_queued_cost 5"), "{text}");
    // It leaves in its turn: the first request's 10 ms.
    clock.advance(Duration::from_millis(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(live.await.is_ok());
}

/// Polls a pinned future once; whether it is still waiting.
fn futures_pending<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_pending()
}

#[test]
fn a_cost_above_a_limit_is_refused_as_never_and_others_say_when() {
    let clock = ManualClock::new();
    let t = Throttler::builder()
        .clock(clock.clone())
        .cost(CostModel::Header {
            name: "x-cost".into(),
            default: 1,
        })
        .rule(Rule::new(
            "global",
            Extract::global(),
            Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(60)).unwrap()),
        ))
        .build();
    let err = t.check(&RequestHead::of(&costing("500"))).unwrap_err();
    assert_eq!(err.kind(), RejectionKind::CostTooHigh);
    assert_eq!(err.rule(), Some("global"));
    assert_eq!(err.http_status(), 413);
    assert_eq!(err.grpc_code(), tonic::Code::InvalidArgument);
    assert_eq!(err.retry_after(), None);
    assert_eq!(
        err.to_string(),
        "cost 500 exceeds the most rule \"global\" ever admits (10)"
    );
    // Within the limit but over what is left: a 429 that says when.
    assert!(t.check(&RequestHead::of(&costing("8"))).is_ok());
    clock.advance(Duration::from_secs(20));
    let err = t.check(&RequestHead::of(&costing("3"))).unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Limited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(40)));
}

/// A request with header `x-api-key` of raw bytes `key`.
fn raw_key(key: &[u8]) -> Request<()> {
    Request::builder()
        .header("x-api-key", HeaderValue::from_bytes(key).unwrap())
        .body(())
        .unwrap()
}

fn one_per_minute(key: Extract) -> Rule {
    Rule::new(
        "key",
        key,
        Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(60)).unwrap()),
    )
}

#[test]
fn every_utf8_value_is_a_key_and_keyless_requests_share_one_bucket() {
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .rule(one_per_minute(Extract::header("x-api-key")))
        .build();
    let check = |r: &Request<()>| t.check(&RequestHead::of(r)).map(|_| ());
    // A non-ASCII key is a key like any other.
    let accented = raw_key("clé".as_bytes());
    assert!(check(&accented).is_ok());
    assert_eq!(check(&accented).unwrap_err().kind(), RejectionKind::Limited);
    assert!(check(&raw_key("cle".as_bytes())).is_ok());
    // No header, or one that is not UTF-8: one shared bucket.
    assert!(check(&Request::builder().body(()).unwrap()).is_ok());
    for r in [Request::builder().body(()).unwrap(), raw_key(b"\xff\xfe")] {
        assert_eq!(check(&r).unwrap_err().kind(), RejectionKind::Limited);
    }

    // Rejected outright, or (chosen explicitly) not limited.
    let t = Throttler::builder()
        .rule(one_per_minute(Extract::header("x-api-key")).missing_key(MissingKey::Reject))
        .rule(
            Rule::new(
                "other",
                Extract::header("x-other"),
                Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(60)).unwrap()),
            )
            .missing_key(MissingKey::Skip),
        )
        .build();
    let err = t
        .check(&RequestHead::of(&Request::builder().body(()).unwrap()))
        .unwrap_err();
    assert_eq!(err.kind(), RejectionKind::NoKey);
    assert_eq!(err.http_status(), 400);
    assert_eq!(err.retry_after(), None);
    assert_eq!(err.to_string(), "no key for rule \"key\"");
    let r = raw_key(b"k2");
    assert!(t.check(&RequestHead::of(&r)).is_ok());
    // "other" skips it, "key" limits it.
    assert_eq!(
        t.check(&RequestHead::of(&r)).unwrap_err().rule(),
        Some("key")
    );
}

#[test]
fn an_empty_header_is_refused_under_reject_and_limited_as_the_key_empty_otherwise() {
    let under = |missing: MissingKey| {
        Throttler::builder()
            .clock(ManualClock::new())
            .rule(one_per_minute(Extract::header("x-api-key")).missing_key(missing))
            .build()
    };
    let empty = raw_key(b"");
    let absent = Request::builder().body(()).unwrap();
    // Reject: an empty value is refused as an absent header is, every time.
    let t = under(MissingKey::Reject);
    for r in [&empty, &empty, &absent] {
        let err = t.check(&RequestHead::of(r)).unwrap_err();
        assert_eq!(err.kind(), RejectionKind::NoKey);
        assert_eq!(err.http_status(), 400);
    }
    // Shared and Skip: the key "", one a minute, apart from the keyless.
    for missing in [MissingKey::Shared, MissingKey::Skip] {
        let t = under(missing);
        assert!(t.check(&RequestHead::of(&empty)).is_ok());
        let err = t.check(&RequestHead::of(&empty)).unwrap_err();
        assert_eq!(err.kind(), RejectionKind::Limited, "{missing:?}");
        assert!(t.check(&RequestHead::of(&absent)).is_ok());
        assert!(t.check(&RequestHead::of(&raw_key(b"k"))).is_ok());
    }
}

#[test]
fn a_peer_ip_rule_on_a_server_without_peer_addresses_is_logged_once_and_limits() {
    let logs = Logs::default();
    let subscriber = logs.subscriber();
    tracing::subscriber::with_default(subscriber, || {
        let t = Throttler::builder()
            .clock(ManualClock::new())
            .rule(one_per_minute(Extract::peer_ip()))
            .build();
        // No connect info: every request lands in the one shared bucket.
        let r = Request::builder().body(()).unwrap();
        assert!(t.check(&RequestHead::of(&r)).is_ok());
        for _ in 0..3 {
            assert!(t.check(&RequestHead::of(&r)).is_err());
        }
    });
    let text = logs.text();
    assert_eq!(logs.count("can find no key"), 1, "{text}");
    assert!(
        text.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_cannot_declare_itself_critical() {
    let clock = ManualClock::new();
    let build = |trust: Trust| {
        Throttler::builder()
            .clock(clock.clone())
            .criticality_header("x-criticality", trust)
            .queue(1, RateSpec::new(1.0).unwrap())
            .build()
    };
    let from = |peer: &str, crit: Option<Criticality>| {
        let mut r = Request::builder()
            .header("x-criticality", "CRITICAL")
            .body(())
            .unwrap();
        r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        if let Some(c) = crit {
            r.extensions_mut().insert(c);
        }
        r
    };
    let t = build(Trust::networks(["10.0.0.0/8"]).unwrap());
    let outsider = from("192.0.2.1:4000", None);
    assert_eq!(
        t.criticality(&RequestHead::of(&outsider)),
        Criticality::NotCritical
    );
    assert_eq!(
        t.criticality(&RequestHead::of(&from("10.1.1.1:4000", None))),
        Criticality::Critical
    );
    // An authenticating layer's word (an extension) counts from anyone.
    let vouched = from("192.0.2.1:4000", Some(Criticality::Critical));
    assert_eq!(
        t.criticality(&RequestHead::of(&vouched)),
        Criticality::Critical
    );
    // The default trusts no header at all.
    let plain = Throttler::builder().build();
    assert_eq!(
        plain.criticality(&RequestHead::of(&from("10.1.1.1:4000", None))),
        Criticality::NotCritical
    );
    // So an outsider's "CRITICAL" evicts nobody from a full queue.
    assert!(poll_once(t.admit(&RequestHead::of(&outsider)))
        .unwrap()
        .is_ok());
    let r = from("192.0.2.2:4000", None);
    let head = RequestHead::of(&r);
    let mut queued = pin!(t.admit(&head));
    assert!(futures_pending(queued.as_mut()));
    let err = poll_once(t.admit(&RequestHead::of(&outsider)))
        .expect("refused at once")
        .unwrap_err();
    assert_eq!(err.kind(), RejectionKind::QueueFull);
    // A 503 says when: the queued request leaves at 1 s.
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(futures_pending(queued.as_mut()));
}

#[tokio::test(start_paused = true)]
async fn a_predicted_cost_is_capped_at_what_the_queue_admits() {
    let clock = ManualClock::new();
    let t = Throttler::builder()
        .clock(clock.clone())
        .cost(CostModel::Predicted {
            class: Extract::method_and_path(),
            default: 1,
        })
        .queue(10, RateSpec::new(100.0).unwrap())
        .build();
    let r = Request::builder().uri("/report").body(()).unwrap();
    // The class really costs 1000: a prediction that large could never
    // pass the queue, so it is charged 10 and post-accounted the rest.
    poll_once(t.admit(&RequestHead::of(&r)))
        .unwrap()
        .unwrap()
        .finish(1000);
    clock.advance(Duration::from_secs(60));
    let p = poll_once(t.admit(&RequestHead::of(&r)))
        .expect("passes at once")
        .unwrap();
    assert_eq!(p.cost(), 10);
}
