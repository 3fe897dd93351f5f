//! Beyond the reference: per-limit algorithms (`token_bucket`, `gcra`,
//! `sliding_window`) and several limits on one descriptor, answered over
//! gRPC in the statuses and headers Envoy reads.

mod common;

use common::*;
use tollgate_rls::pb::rate_limit_response::rate_limit::Unit;
use tollgate_rls::pb::rate_limit_response::Code;
use tollgate_rls::RlsSettings;

const CONFIG: &str = r#"
domain: beyond
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: burst_and_day
    rate_limit:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 3, name: daily}
  - key: two_buckets
    rate_limit:
      - {unit: second, requests_per_unit: 2, algorithm: token_bucket}
      - {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
"#;

const MS: u64 = 1_000_000;

async fn server(headers: bool) -> Server {
    let settings = RlsSettings {
        response_headers: headers,
        ..RlsSettings::default()
    };
    Server::start(Some(CONFIG), settings).await
}

async fn one(s: &mut Server, key: &str) -> tollgate_rls::pb::rate_limit_response::DescriptorStatus {
    let r = s.ok("beyond", vec![d(&[(key, "x")])], 0).await;
    r.statuses[0].clone()
}

#[tokio::test]
async fn a_token_bucket_refills_continuously() {
    let mut s = server(false).await;
    let limit = (10, Unit::Second, "");
    // Ten at once; the bucket is full again one second after the last.
    for left in (0..10).rev() {
        assert_eq!(one(&mut s, "tb").await, ok(limit, left, 1));
    }
    assert_eq!(one(&mut s, "tb").await, over(limit, 1));
    // A tenth of a second later, one more token.
    s.clock.advance(std::time::Duration::from_nanos(100 * MS));
    assert_eq!(one(&mut s, "tb").await, ok(limit, 0, 1));
    assert_eq!(one(&mut s, "tb").await, over(limit, 1));
}

#[tokio::test]
async fn gcra_spaces_requests_after_its_burst() {
    let mut s = server(false).await;
    let limit = (10, Unit::Second, "");
    for left in (0..10).rev() {
        assert_eq!(one(&mut s, "gcra").await, ok(limit, left, 1));
    }
    assert_eq!(one(&mut s, "gcra").await, over(limit, 1));
    s.clock.advance(std::time::Duration::from_nanos(100 * MS));
    assert_eq!(one(&mut s, "gcra").await, ok(limit, 0, 1));
}

#[tokio::test]
async fn a_sliding_window_weighs_the_previous_window() {
    let mut s = server(false).await;
    let limit = (10, Unit::Minute, "");
    for _ in 0..10 {
        one(&mut s, "sw").await;
    }
    assert_eq!(one(&mut s, "sw").await.code, Code::OverLimit as i32);
    // At the next minute the last one still counts whole: still over,
    // where a fixed window would have admitted ten more.
    s.at(60);
    assert_eq!(one(&mut s, "sw").await.code, Code::OverLimit as i32);
    // Half way through it, half of it: 5 + 1 of 10.
    s.at(90);
    let status = one(&mut s, "sw").await;
    assert_eq!(
        (status.code, status.current_limit, status.limit_remaining),
        (Code::Ok as i32, Some(limit_of(limit)), 4)
    );
}

fn limit_of(
    (rpu, unit, name): (u32, Unit, &str),
) -> tollgate_rls::pb::rate_limit_response::RateLimit {
    tollgate_rls::pb::rate_limit_response::RateLimit {
        name: name.to_owned(),
        requests_per_unit: rpu,
        unit: unit as i32,
    }
}

#[tokio::test]
async fn several_limits_answer_with_the_closest_and_count_every_hit() {
    let mut s = server(true).await;
    let burst = (2, Unit::Second, "");
    let daily = (3, Unit::Day, "daily");
    let r = s.ok("beyond", vec![d(&[("burst_and_day", "x")])], 0).await;
    assert_eq!(r.statuses, vec![ok(burst, 1, 1)]);
    let headers: Vec<(&str, &str)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("RateLimit-Limit", "2"),
            ("RateLimit-Remaining", "1"),
            ("RateLimit-Reset", "1")
        ]
    );
    assert_eq!(one(&mut s, "burst_and_day").await, ok(burst, 0, 1));
    let r = s.ok("beyond", vec![d(&[("burst_and_day", "x")])], 0).await;
    assert_eq!(
        (r.overall_code, r.statuses.clone()),
        (Code::OverLimit as i32, vec![over(burst, 1)])
    );
    // A second later the burst admits again, but the day has counted the
    // three hits (the refused one too, as fixed windows do): over it, with
    // the day's reset (80,040 s of the day gone at T).
    s.at(1);
    assert_eq!(one(&mut s, "burst_and_day").await, over(daily, 6359));
}

#[tokio::test]
async fn smooth_limits_give_back_what_another_limit_refused() {
    let mut s = server(false).await;
    let second = (2, Unit::Second, "");
    let minute = (3, Unit::Minute, "");
    assert_eq!(one(&mut s, "two_buckets").await, ok(second, 1, 1));
    assert_eq!(one(&mut s, "two_buckets").await, ok(second, 0, 1));
    // The second's bucket refuses; the minute's admitted and gives it back.
    assert_eq!(
        one(&mut s, "two_buckets").await.code,
        Code::OverLimit as i32
    );
    // A second later: one token left in the minute's bucket, not none.
    s.at(1);
    let status = one(&mut s, "two_buckets").await;
    assert_eq!(
        (status.code, status.current_limit, status.limit_remaining),
        (Code::Ok as i32, Some(limit_of(minute)), 0)
    );
}
