//! The black-box cases of Envoy's rate limit service: a real server on a
//! port, a manual clock behind it at a known Unix time, a real client, and
//! every answer compared whole (codes, current limits with their names,
//! remaining, reset, headers) with envoyproxy/ratelimit's for the same
//! configuration, requests and times. Every case runs twice: on the
//! in-memory counters (`memory::`) and on a Redis store of its own, the
//! store on the same manual clock (`redis::`), with the same answers.

mod common;

use common::*;
use tollgate_rls::pb::rate_limit_response::rate_limit::Unit;
use tollgate_rls::pb::rate_limit_response::Code;
use tollgate_rls::pb::HeaderValue;
use tollgate_rls::RlsSettings;

/// The configuration every case runs on.
const EDGE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: remote_address
    value: 10.0.0.1
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value: acme
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5, name: gold_user}
  - key: vip
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: gold_user}]}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 1}
"#;

const M3: (u32, Unit, &str) = (3, Unit::Minute, "");
const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

async fn edge() -> Server {
    Server::start(Some(EDGE), RlsSettings::default()).await
}

/// One descriptor's answer: (overall code, its status).
async fn one(
    s: &mut Server,
    entries: &[(&str, &str)],
) -> (i32, tollgate_rls::pb::rate_limit_response::DescriptorStatus) {
    let r = s.ok("edge", vec![d(entries)], 0).await;
    assert_eq!(r.statuses.len(), 1);
    (r.overall_code, r.statuses[0].clone())
}

async fn cases_1_to_4_count_per_address_in_minute_windows() {
    let mut s = edge().await;
    let ip = [("remote_address", "1.2.3.4")];
    // 1
    assert_eq!(one(&mut s, &ip).await, (OK, ok(M3, 2, 60)));
    // 2: ten seconds later, three more.
    s.at(10);
    assert_eq!(one(&mut s, &ip).await, (OK, ok(M3, 1, 50)));
    assert_eq!(one(&mut s, &ip).await, (OK, ok(M3, 0, 50)));
    assert_eq!(one(&mut s, &ip).await, (OVER, over(M3, 50)));
    // 4: another address, its own counter.
    assert_eq!(
        one(&mut s, &[("remote_address", "1.2.3.5")]).await,
        (OK, ok(M3, 2, 50))
    );
    // 20: over limit beside a descriptor with no limit.
    let r = s.ok("edge", vec![d(&ip), d(&[("foo", "bar")])], 0).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses, vec![over(M3, 50), none()]);
    // 3: the next minute is a new window.
    s.at(60);
    assert_eq!(one(&mut s, &ip).await, (OK, ok(M3, 2, 60)));
}

async fn cases_5_to_11_blocked_exempt_unmatched_and_refused() {
    let mut s = edge().await;
    // 5: a limit of 0.
    assert_eq!(
        one(&mut s, &[("remote_address", "50.0.0.5")]).await,
        (OVER, over((0, Unit::Minute, ""), 60))
    );
    // 6: a node without a limit exempts its value.
    assert_eq!(
        one(&mut s, &[("remote_address", "10.0.0.1")]).await,
        (OK, none())
    );
    // 7: no rule.
    assert_eq!(one(&mut s, &[("foo", "bar")]).await, (OK, none()));
    // 8: an unknown domain.
    let r = s
        .ok("nope", vec![d(&[("remote_address", "1.2.3.4")])], 0)
        .await;
    assert_eq!((r.overall_code, r.statuses), (OK, vec![none()]));
    // 9 and 10: gRPC errors, UNKNOWN as the reference's Go server sends.
    let e = s.call("", vec![d(&[("a", "b")])], 0).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::Unknown, "rate limit domain must not be empty")
    );
    let e = s.call("edge", vec![], 0).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            tonic::Code::Unknown,
            "rate limit descriptor list must not be empty"
        )
    );
    // 11: a request deeper than the tree matches nothing.
    assert_eq!(
        one(&mut s, &[("remote_address", "1.2.3.4"), ("path", "/x")]).await,
        (OK, none())
    );
    // ... and so counted nothing.
    assert_eq!(
        one(&mut s, &[("remote_address", "1.2.3.4")]).await,
        (OK, ok(M3, 2, 60))
    );
}

async fn cases_12_to_16_nesting_wildcards_shared_counters_unlimited() {
    let mut s = edge().await;
    // 12
    assert_eq!(
        one(&mut s, &[("tenant", "acme")]).await,
        (OK, ok((10, Unit::Second, ""), 9, 1))
    );
    assert_eq!(
        one(&mut s, &[("tenant", "acme"), ("user", "bob")]).await,
        (OK, ok((2, Unit::Minute, ""), 1, 60))
    );
    assert_eq!(
        one(&mut s, &[("tenant", "other"), ("user", "bob")]).await,
        (OK, none())
    );
    // 13: a wildcard counts per value.
    let p2 = (2, Unit::Minute, "");
    let users = [("path", "/api/users")];
    assert_eq!(one(&mut s, &users).await, (OK, ok(p2, 1, 60)));
    assert_eq!(one(&mut s, &users).await, (OK, ok(p2, 0, 60)));
    assert_eq!(one(&mut s, &users).await, (OVER, over(p2, 60)));
    assert_eq!(
        one(&mut s, &[("path", "/api/orders")]).await,
        (OK, ok(p2, 1, 60))
    );
    // 14
    assert_eq!(one(&mut s, &[("path", "/web/x")]).await, (OK, none()));
    // 15: share_threshold: one counter for every matching value; the hour
    // began 840 s ago.
    let h2 = (2, Unit::Hour, "");
    assert_eq!(
        one(&mut s, &[("files", "files/a.pdf")]).await,
        (OK, ok(h2, 1, 2760))
    );
    assert_eq!(
        one(&mut s, &[("files", "files/b.csv")]).await,
        (OK, ok(h2, 0, 2760))
    );
    assert_eq!(
        one(&mut s, &[("files", "files/c.txt")]).await,
        (OVER, over(h2, 2760))
    );
    // 16
    assert_eq!(
        one(&mut s, &[("internal", "x")]).await,
        (OK, st(Code::Ok, None, u32::MAX, None))
    );
}

async fn cases_17_to_19_shadow_and_quota_modes() {
    let mut s = edge().await;
    let m1 = (1, Unit::Minute, "");
    // 17: a shadow rule counts but never refuses.
    assert_eq!(one(&mut s, &[("soft", "x")]).await, (OK, ok(m1, 0, 60)));
    assert_eq!(one(&mut s, &[("soft", "x")]).await, (OK, ok(m1, 0, 60)));
    // 18: a quota descriptor alone fails the request.
    assert_eq!(one(&mut s, &[("q", "a")]).await, (OK, ok(m1, 0, 60)));
    assert_eq!(one(&mut s, &[("q", "a")]).await, (OVER, over(m1, 60)));
    // 19: not while another quota descriptor passes.
    let r = s
        .ok("edge", vec![d(&[("q", "a")]), d(&[("q", "b")])], 0)
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses, vec![over(m1, 60), ok(m1, 0, 60)]);
}

async fn cases_21_to_24_hits_addend() {
    let mut s = edge().await;
    // 21: the request's hits_addend; 0 means 1.
    let a = [("remote_address", "5.5.5.5")];
    assert_eq!(
        s.ok("edge", vec![d(&a)], 3).await.statuses,
        vec![ok(M3, 0, 60)]
    );
    let r = s.ok("edge", vec![d(&a)], 0).await;
    assert_eq!((r.overall_code, r.statuses), (OVER, vec![over(M3, 60)]));
    // 22: an over-limit hit is counted, so a check-only call sees 5 > 3.
    let b = [("remote_address", "6.6.6.6")];
    assert_eq!(
        s.ok("edge", vec![d(&b)], 5).await.statuses,
        vec![over(M3, 60)]
    );
    let r = s.ok("edge", vec![dh(&b, 0)], 0).await;
    assert_eq!((r.overall_code, r.statuses), (OVER, vec![over(M3, 60)]));
    // 23: check-only at exactly the limit is OK and counts nothing.
    let c = [("remote_address", "7.0.0.1")];
    assert_eq!(
        s.ok("edge", vec![d(&c)], 3).await.statuses,
        vec![ok(M3, 0, 60)]
    );
    assert_eq!(
        s.ok("edge", vec![dh(&c, 0)], 0).await.statuses,
        vec![ok(M3, 0, 60)]
    );
    assert_eq!(
        s.ok("edge", vec![dh(&c, 0)], 0).await.statuses,
        vec![ok(M3, 0, 60)]
    );
    // 24: a descriptor's own hits_addend beats the request's.
    let r = s
        .ok(
            "edge",
            vec![
                dh(&[("remote_address", "7.0.0.2")], 2),
                d(&[("tenant", "acme"), ("user", "zed")]),
            ],
            5,
        )
        .await;
    assert_eq!(
        r.statuses,
        vec![ok(M3, 1, 60), over((2, Unit::Minute, ""), 60)]
    );
}

async fn cases_25_to_28_limit_overrides() {
    let mut s = edge().await;
    let minute = Unit::Minute as i32;
    let m1 = (1, Unit::Minute, "");
    // 25
    let a = [("remote_address", "7.7.7.7")];
    assert_eq!(
        s.ok("edge", vec![dl(&a, 1, minute)], 0).await.statuses,
        vec![ok(m1, 0, 60)]
    );
    assert_eq!(
        s.ok("edge", vec![dl(&a, 1, minute)], 0).await.statuses,
        vec![over(m1, 60)]
    );
    // 26: an override needs no rule.
    assert_eq!(
        s.ok("edge", vec![dl(&[("foo", "bar")], 1, minute)], 0)
            .await
            .statuses,
        vec![ok(m1, 0, 60)]
    );
    // 27: ... but a known domain.
    assert_eq!(
        s.ok("nope", vec![dl(&[("foo", "bar")], 1, minute)], 0)
            .await
            .statuses,
        vec![none()]
    );
    // 28: the rule and the override share the counter.
    let b = [("remote_address", "8.8.8.8")];
    assert_eq!(one(&mut s, &b).await, (OK, ok(M3, 2, 60)));
    assert_eq!(one(&mut s, &b).await, (OK, ok(M3, 1, 60)));
    assert_eq!(
        s.ok("edge", vec![dl(&b, 10, minute)], 0).await.statuses,
        vec![ok((10, Unit::Minute, ""), 7, 60)]
    );
}

async fn cases_29_to_33_names_replaces_empty_values_weeks() {
    let mut s = edge().await;
    let gold = (5, Unit::Minute, "gold_user");
    let u1 = [("plan", "gold"), ("user", "u1")];
    // 29
    assert_eq!(one(&mut s, &u1).await, (OK, ok(gold, 4, 60)));
    // 30: the vip limit replaces gold_user in the same request.
    let r = s
        .ok("edge", vec![d(&u1), d(&[("vip", "y"), ("user", "u1")])], 0)
        .await;
    assert_eq!(
        r.statuses,
        vec![none(), ok((100, Unit::Minute, ""), 99, 60)]
    );
    // ... and the gold counter was not charged.
    assert_eq!(one(&mut s, &u1).await, (OK, ok(gold, 3, 60)));
    // 31: a node with no limit of its own.
    assert_eq!(one(&mut s, &[("plan", "gold")]).await, (OK, none()));
    // 32: the value-less rule matches the empty value.
    assert_eq!(
        one(&mut s, &[("remote_address", "")]).await,
        (OK, ok(M3, 2, 60))
    );
    // 33: weeks start on Thursdays; 512,040 s of this one have passed.
    assert_eq!(
        one(&mut s, &[("week", "x")]).await,
        (OK, ok((1, Unit::Week, ""), 0, 92_760))
    );
}

async fn case_38_identical_descriptors_count_in_order() {
    let mut s = edge().await;
    let c = [("remote_address", "c")];
    let r = s.ok("edge", vec![d(&c), d(&c)], 0).await;
    assert_eq!(r.statuses, vec![ok(M3, 2, 60), ok(M3, 1, 60)]);
}

fn headers(r: &tollgate_rls::pb::RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|HeaderValue { key, value, .. }| (key.clone(), value.clone()))
        .collect()
}

fn h(limit: u32, remaining: u32, reset: u64) -> Vec<(String, String)> {
    vec![
        ("RateLimit-Limit".to_owned(), limit.to_string()),
        ("RateLimit-Remaining".to_owned(), remaining.to_string()),
        ("RateLimit-Reset".to_owned(), reset.to_string()),
    ]
}

async fn cases_34_and_35_response_headers() {
    let settings = RlsSettings {
        response_headers: true,
        ..RlsSettings::default()
    };
    let mut s = Server::start(Some(EDGE), settings).await;
    let both = || {
        vec![
            d(&[("remote_address", "9.9.9.9")]),
            d(&[("tenant", "acme"), ("user", "hdr")]),
        ]
    };
    // 34: the status with the least remaining.
    let r = s.ok("edge", both(), 0).await;
    assert_eq!(
        r.statuses,
        vec![ok(M3, 2, 60), ok((2, Unit::Minute, ""), 1, 60)]
    );
    assert_eq!(headers(&r), h(2, 1, 60));
    // No headers while no status has a limit.
    assert_eq!(
        headers(&s.ok("edge", vec![d(&[("foo", "bar")])], 0).await),
        vec![]
    );
    // 35: both over: the last over-limit status.
    s.ok("edge", both(), 0).await;
    s.ok("edge", both(), 0).await;
    let r = s.ok("edge", both(), 0).await;
    assert_eq!(
        r.statuses,
        vec![over(M3, 60), over((2, Unit::Minute, ""), 60)]
    );
    assert_eq!(headers(&r), h(2, 0, 60));
    // Without the setting, none.
    let mut plain = edge().await;
    assert_eq!(headers(&plain.ok("edge", both(), 0).await), vec![]);
}

async fn case_36_global_shadow_mode_answers_ok_and_keeps_the_statuses() {
    let settings = RlsSettings {
        shadow_mode: true,
        ..RlsSettings::default()
    };
    let mut s = Server::start(Some(EDGE), settings).await;
    let ip = [("remote_address", "1.2.3.4")];
    for _ in 0..3 {
        one(&mut s, &ip).await;
    }
    assert_eq!(one(&mut s, &ip).await, (OK, over(M3, 60)));
}

async fn case_37_stop_increment_when_over_limit_spares_the_siblings() {
    let user = (2, Unit::Minute, "");
    let pair = || {
        vec![
            d(&[("remote_address", "a")]),
            d(&[("tenant", "acme"), ("user", "s")]),
        ]
    };
    for (stop, remaining) in [(true, 2), (false, 1)] {
        let settings = RlsSettings {
            stop_increment_when_over_limit: stop,
            ..RlsSettings::default()
        };
        let mut s = Server::start(Some(EDGE), settings).await;
        for _ in 0..3 {
            one(&mut s, &[("remote_address", "a")]).await;
        }
        let r = s.ok("edge", pair(), 0).await;
        // The user's counter is charged only without the setting.
        assert_eq!(
            r.statuses,
            vec![over(M3, 60), ok(user, remaining, 60)],
            "stop: {stop}"
        );
        let r = s
            .ok("edge", vec![d(&[("tenant", "acme"), ("user", "s")])], 0)
            .await;
        assert_eq!(
            r.statuses,
            vec![ok(user, remaining - 1, 60)],
            "stop: {stop}"
        );
    }
}

async fn case_40_without_a_configuration_every_call_fails() {
    let mut s = Server::start(None, RlsSettings::default()).await;
    let e = s.call("edge", vec![d(&[("a", "b")])], 0).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::Unknown, "no rate limit configuration loaded")
    );
    // Once one is set, calls are answered.
    s.service
        .set_config(tollgate_rls::RlsConfig::from_yaml("c.yaml", EDGE).unwrap());
    assert_eq!(
        one(&mut s, &[("remote_address", "1.2.3.4")]).await,
        (OK, ok(M3, 2, 60))
    );
}

/// Each case as a test on each store.
macro_rules! on_each_store {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::Store::Memory.run(super::$case()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $case() {
                    super::Store::redis().run(super::$case()).await;
                }
            )*
        }
    };
}

on_each_store!(
    cases_1_to_4_count_per_address_in_minute_windows,
    cases_5_to_11_blocked_exempt_unmatched_and_refused,
    cases_12_to_16_nesting_wildcards_shared_counters_unlimited,
    cases_17_to_19_shadow_and_quota_modes,
    cases_21_to_24_hits_addend,
    cases_25_to_28_limit_overrides,
    cases_29_to_33_names_replaces_empty_values_weeks,
    case_38_identical_descriptors_count_in_order,
    cases_34_and_35_response_headers,
    case_36_global_shadow_mode_answers_ok_and_keeps_the_statuses,
    case_37_stop_increment_when_over_limit_spares_the_siblings,
    case_40_without_a_configuration_every_call_fails,
);
