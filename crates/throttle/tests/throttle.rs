//! The throttler: rules, soft and hard limits, bans, shadow mode, cost
//! prediction and the criticality queue, on a manual clock.

#[path = "common/gathered.rs"]
mod common_gathered;
use common_gathered::gathered;
use std::time::Duration;

use axum::http::Request;
use tollgate::{ManualClock, RateSpec};
use tollgate_throttle::{
    CostModel, Criticality, Extract, FixedWindow, Limit, Mode, RejectionKind, RequestHead, Rule,
    Throttler, TokenPool, Trust,
};

fn req(key: &str) -> Request<()> {
    Request::builder()
        .uri("/items")
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

fn window(limit: u64, secs: u64) -> Limit {
    Limit::FixedWindow(FixedWindow::new(limit, Duration::from_secs(secs)).unwrap())
}

#[test]
fn soft_limit_warns_and_hard_limit_rejects_with_retry_after() {
    let clock = ManualClock::new();
    let t = Throttler::builder()
        .clock(clock.clone())
        .rule(Rule::new("key", Extract::header("x-api-key"), window(3, 60)).soft(window(1, 60)))
        .build();
    let r = req("a");
    let head = RequestHead::of(&r);
    assert!(t.check(&head).unwrap().warnings().is_empty());
    let p = t.check(&head).unwrap();
    assert_eq!(p.warnings().len(), 1);
    assert_eq!(p.warnings()[0].limit, 3);
    assert_eq!(p.warnings()[0].remaining, 1);
    assert_eq!(t.check(&head).unwrap().warnings()[0].remaining, 0);
    clock.advance(Duration::from_secs(15));
    let err = t.check(&head).unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Limited);
    assert_eq!(err.http_status(), 429);
    assert_eq!(err.grpc_code(), tonic::Code::ResourceExhausted);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(45)));
    // Another key is independent.
    assert!(t.check(&RequestHead::of(&req("b"))).is_ok());
    let text = gathered(t.registry());
    assert!(
        text.contains(r#"tollgate_throttle_decisions_total{outcome="soft_exceeded",rule="key"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"tollgate_throttle_decisions_total{outcome="rejected",rule="key"} 1"#));
    assert!(text.contains(r#"tollgate_throttle_keys{rule="key"} 2"#));
    // Requests without the header share one bucket of their own.
    let anonymous = Request::builder().body(()).unwrap();
    for _ in 0..3 {
        assert!(t.check(&RequestHead::of(&anonymous)).is_ok());
    }
    assert!(t.check(&RequestHead::of(&anonymous)).is_err());
    assert!(t.check(&RequestHead::of(&req("c"))).is_ok());
}

#[test]
fn a_ban_lasts_past_the_limit_for_its_duration() {
    let clock = ManualClock::new();
    let t = Throttler::builder()
        .clock(clock.clone())
        .rule(
            Rule::new("key", Extract::header("x-api-key"), window(1, 60))
                .ban(Duration::from_secs(3600)),
        )
        .build();
    let r = req("a");
    let head = RequestHead::of(&r);
    assert!(t.check(&head).is_ok());
    clock.advance(Duration::from_secs(10));
    let err = t.check(&head).unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Limited);
    // 50 s to the end of the window, then the hour.
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3650)));
    clock.advance(Duration::from_secs(3649));
    let err = t.check(&head).unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Banned);
    assert_eq!(err.to_string(), "banned by rule \"key\"");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(gathered(t.registry()).contains(r#"tollgate_throttle_banned_keys{rule="key"} 1"#));
    clock.advance(Duration::from_secs(1));
    assert!(t.check(&head).is_ok());
}

#[test]
fn shadow_mode_counts_but_admits() {
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .rule(Rule::new("dry", Extract::global(), window(2, 60)).mode(Mode::Shadow))
        .build();
    let r = req("a");
    for _ in 0..5 {
        assert!(t.check(&RequestHead::of(&r)).is_ok());
    }
    let text = gathered(t.registry());
    assert!(text.contains(r#"tollgate_throttle_decisions_total{outcome="admitted",rule="dry"} 2"#));
    assert!(text
        .contains(r#"tollgate_throttle_decisions_total{outcome="shadow_rejected",rule="dry"} 3"#));
}

#[test]
fn a_rejection_refunds_what_earlier_rules_charged() {
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .rule(Rule::new("global", Extract::global(), window(2, 60)))
        .rule(Rule::new(
            "key",
            Extract::header("x-api-key"),
            window(1, 60),
        ))
        .build();
    assert!(t.check(&RequestHead::of(&req("a"))).is_ok());
    // Rejected by "key": "global" must not keep the charge.
    assert!(t.check(&RequestHead::of(&req("a"))).is_err());
    assert!(t.check(&RequestHead::of(&req("b"))).is_ok());
    assert_eq!(
        t.check(&RequestHead::of(&req("c"))).unwrap_err().rule(),
        Some("global")
    );
}

/// Rule 1 (10 a minute per API key, with `RateLimit` fields) and a gate
/// of 1 a minute per `x-gate`, on a frozen clock.
fn gated() -> Throttler {
    Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new("per-key", Extract::header("x-api-key"), window(10, 60))
                .ratelimit_headers(true),
        )
        .rule(Rule::new("gate", Extract::header("x-gate"), window(1, 60)))
        .build()
}

fn gated_req() -> Request<()> {
    Request::builder()
        .header("x-api-key", "k")
        .header("x-gate", "g")
        .body(())
        .unwrap()
}

#[test]
fn a_refusal_by_a_later_rule_reports_the_earlier_rule_after_its_refund() {
    let t = gated();
    let r = gated_req();
    let p = t.check(&RequestHead::of(&r)).unwrap();
    assert_eq!(p.limits()[0].remaining, 9);
    assert_eq!(p.limits()[0].reset, Duration::from_secs(60));
    // Refused by the gate: "per-key" was charged, then refunded, so the
    // key still has 9 left, as the refusal says.
    let err = t.check(&RequestHead::of(&r)).unwrap_err();
    assert_eq!(err.rule(), Some("gate"));
    assert_eq!(err.limits().len(), 1);
    assert_eq!(err.limits()[0].rule.as_ref(), "per-key");
    assert_eq!(err.limits()[0].quota, 10);
    assert_eq!(err.limits()[0].remaining, 9);
    assert_eq!(err.limits()[0].reset, Duration::from_secs(60));
    // The next admitted request is the second charged: 8 left.
    let other = Request::builder()
        .header("x-api-key", "k")
        .header("x-gate", "h")
        .body(())
        .unwrap();
    assert_eq!(
        t.check(&RequestHead::of(&other)).unwrap().limits()[0].remaining,
        8
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_reports_the_rules_as_they_stand_after_the_refund() {
    // A bucket of 3 at 5/s (it refills one op in 200 ms) with its fields,
    // then a queue of one unit released at 1/s.
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new(
                "per-key",
                Extract::header("x-api-key"),
                Limit::TokenPool(TokenPool::new("5".parse().unwrap()).with_burst(3).unwrap()),
            )
            .ratelimit_headers(true),
        )
        .queue(1, RateSpec::new(1.0).unwrap())
        .build();
    let r = req("a");
    // The first passes the idle queue; the second waits in it.
    let first = t.admit(&RequestHead::of(&r)).await.unwrap();
    assert_eq!(first.limits()[0].remaining, 2);
    assert_eq!(first.limits()[0].reset, Duration::from_millis(200));
    let t2 = t.clone();
    let waiting =
        tokio::spawn(async move { t2.admit(&RequestHead::of(&req("a"))).await.map(|_| ()) });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    // The third is charged to the bucket (0 left, full in 600 ms), then
    // refused by the full queue and refunded: 1 left, full in 400 ms.
    let full = t.admit(&RequestHead::of(&r)).await.unwrap_err();
    assert_eq!(full.kind(), RejectionKind::QueueFull);
    assert_eq!(full.limits().len(), 1);
    assert_eq!(full.limits()[0].remaining, 1);
    assert_eq!(full.limits()[0].reset, Duration::from_millis(400));
    waiting.abort();
}

#[test]
fn predicted_costs_are_post_accounted() {
    let t = Throttler::builder()
        .clock(ManualClock::new())
        .cost(CostModel::Predicted {
            class: Extract::method_and_path(),
            default: 1,
        })
        .rule(Rule::new(
            "key",
            Extract::header("x-api-key"),
            window(12, 60),
        ))
        .build();
    let r = req("a");
    let head = RequestHead::of(&r);
    let p = t.check(&head).unwrap();
    assert_eq!(p.cost(), 1);
    // It really cost 6: 5 more are charged; the class now predicts 6.
    p.finish(6);
    let p = t.check(&head).unwrap();
    assert_eq!(p.cost(), 6);
    p.finish(6);
    // 12 charged of 12: a request predicted at 6 no longer fits...
    assert!(t.check(&head).is_err());
    // ...while another key is unaffected.
    assert_eq!(t.check(&RequestHead::of(&req("b"))).unwrap().cost(), 6);
}

#[test]
fn header_costs_and_criticality() {
    let t = Throttler::builder()
        .cost(CostModel::Header {
            name: "x-cost".into(),
            default: 2,
        })
        .default_criticality(Criticality::Critical)
        .criticality_header("x-priority", Trust::everyone())
        .build();
    let r = Request::builder()
        .header("x-cost", "7")
        .header("x-priority", "not_critical")
        .body(())
        .unwrap();
    assert_eq!(t.check(&RequestHead::of(&r)).unwrap().cost(), 7);
    assert_eq!(
        t.criticality(&RequestHead::of(&r)),
        Criticality::NotCritical
    );
    let plain = Request::builder().body(()).unwrap();
    assert_eq!(t.check(&RequestHead::of(&plain)).unwrap().cost(), 2);
    assert_eq!(
        t.criticality(&RequestHead::of(&plain)),
        Criticality::Critical
    );
}

fn crit(c: &str) -> Request<()> {
    Request::builder()
        .header("x-criticality", c)
        .body(())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_critical_request_evicts_exactly_one_queued_not_critical_request() {
    let clock = ManualClock::new();
    // Three units of queue, released one per second; callers are trusted
    // to say their criticality.
    let t = Throttler::builder()
        .clock(clock.clone())
        .criticality_header("x-criticality", Trust::everyone())
        .queue(3, RateSpec::new(1.0).unwrap())
        .build();
    // The first passes the idle queue at once.
    assert!(t
        .admit(&RequestHead::of(&crit("NOT_CRITICAL")))
        .await
        .is_ok());
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let t = t.clone();
        waiting.push(tokio::spawn(async move {
            t.admit(&RequestHead::of(&crit("NOT_CRITICAL")))
                .await
                .map(|_| ())
        }));
        tokio::task::yield_now().await;
    }
    // Full: another NOT_CRITICAL is refused at once.
    let full = t
        .admit(&RequestHead::of(&crit("NOT_CRITICAL")))
        .await
        .unwrap_err();
    assert_eq!(full.kind(), RejectionKind::QueueFull);
    assert_eq!(full.http_status(), 503);
    // A CRITICAL one evicts the most recent NOT_CRITICAL.
    let t2 = t.clone();
    let critical = tokio::spawn(async move {
        t2.admit(&RequestHead::of(&crit("CRITICAL")))
            .await
            .map(|_| ())
    });
    tokio::task::yield_now().await;
    // Rejected at once, not when the queue drains.
    let evicted = tokio::time::timeout(Duration::from_millis(1), waiting.pop().unwrap())
        .await
        .expect("the evicted request is answered at once")
        .unwrap()
        .unwrap_err();
    assert_eq!(evicted.kind(), RejectionKind::Evicted);
    assert_eq!(evicted.http_status(), 503);
    assert_eq!(evicted.grpc_code(), tonic::Code::Unavailable);
    // The others are still queued; time releases them, critical last.
    assert!(waiting.iter().all(|w| !w.is_finished()));
    clock.advance(Duration::from_secs(3));
    tokio::time::sleep(Duration::from_secs(2)).await;
    for w in waiting {
        assert!(w.await.unwrap().is_ok());
    }
    assert!(critical.await.unwrap().is_ok());
    let text = gathered(t.registry());
    assert!(
        text.contains(r#"tollgate_throttle_queue_total{outcome="evicted"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"tollgate_throttle_queue_total{outcome="full"} 1"#));
    assert!(text.contains("tollgate_throttle_queued_requests 0"));
}

#[tokio::test(start_paused = true)]
async fn requests_through_the_queue_are_post_accounted_to_its_rate() {
    let clock = ManualClock::new();
    // One unit of cost per second through the queue.
    let t = Throttler::builder()
        .clock(clock.clone())
        .cost(CostModel::Predicted {
            class: Extract::method_and_path(),
            default: 1,
        })
        .queue(10, RateSpec::new(1.0).unwrap())
        .build();
    let r = req("a");
    // Passes the idle queue at once, charged 1 (the queue's next slot at
    // 1 s), but really cost 4: the next slot moves to 4 s.
    let p = t.admit(&RequestHead::of(&r)).await.unwrap();
    assert_eq!(p.cost(), 1);
    p.finish(4);
    clock.advance(Duration::from_secs(3));
    let t2 = t.clone();
    let waiting = tokio::spawn(async move {
        let r = req("a");
        t2.admit(&RequestHead::of(&r)).await.map(|p| {
            let cost = p.cost();
            // Predicted 4, cost 1: 3 refunded to the queue's schedule.
            p.finish(1);
            cost
        })
    });
    tokio::task::yield_now().await;
    // At 3 s it waits in the queue.
    assert!(!waiting.is_finished());
    assert!(gathered(t.registry()).contains("tollgate_throttle_queued_requests 1"));
    clock.advance(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(waiting.await.unwrap().unwrap(), 4);
    // Released at 4 s and charged 4 (next slot 8 s), then refunded 3: at
    // 5 s the queue is idle again and the next request passes at once.
    clock.advance(Duration::from_secs(1));
    assert!(t.admit(&RequestHead::of(&r)).await.is_ok());
    let text = gathered(t.registry());
    assert!(
        text.contains(r#"tollgate_throttle_queue_total{outcome="immediate"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"tollgate_throttle_queue_total{outcome="queued"} 1"#));
}

/// A manual clock that says it moves in steps of 4 ms, as a coarse
/// kernel clock at HZ=250 does.
#[derive(Debug, Clone)]
struct SteppedClock(ManualClock);

impl tollgate::Clock for SteppedClock {
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    fn resolution_ns(&self) -> u64 {
        4_000_000
    }
}

/// Requests admitted now for key `a`, asking until one is rejected.
fn admitted_now(t: &Throttler) -> u64 {
    let r = req("a");
    let head = RequestHead::of(&r);
    let mut n = 0;
    while t.check(&head).is_ok() {
        n += 1;
    }
    n
}

#[test]
fn token_pools_keep_their_rate_on_a_clock_with_a_coarse_step() {
    // 1000/s, strict: the spec's pool is 2 ms, so a 4 ms step would spill
    // half of every step. The throttler widens it to 6 ms (1.5 steps).
    let rule = || {
        Rule::new(
            "key",
            Extract::header("x-api-key"),
            Limit::TokenPool(tollgate_throttle::TokenPool::new(
                "1000,1.0".parse().unwrap(),
            )),
        )
    };
    let clock = ManualClock::new();
    let stepped = Throttler::builder()
        .clock(SteppedClock(clock.clone()))
        .rule(rule())
        .build();
    let fine = Throttler::builder()
        .clock(clock.clone())
        .rule(rule())
        .build();
    assert_eq!(
        admitted_now(&stepped),
        6,
        "a fresh key holds the widened pool"
    );
    assert_eq!(admitted_now(&fine), 2, "the spec's pool: 2 ms");
    for _ in 0..5 {
        clock.advance(Duration::from_millis(4));
        assert_eq!(admitted_now(&stepped), 4, "every step is kept whole");
        assert_eq!(
            admitted_now(&fine),
            2,
            "a 2 ms pool spills half a 4 ms step"
        );
    }
    // A retry time includes one step of the coarse clock, for it to get
    // there: one op at 1000/s is 1 ms.
    let r = req("a");
    let head = RequestHead::of(&r);
    assert_eq!(
        stepped.check(&head).unwrap_err().retry_after(),
        Some(Duration::from_millis(5))
    );
    assert_eq!(
        fine.check(&head).unwrap_err().retry_after(),
        Some(Duration::from_millis(1))
    );
    // Reloaded rules are widened too.
    stepped.reload(vec![rule().max_keys(1000)]);
    assert_eq!(admitted_now(&stepped), 6);
}
