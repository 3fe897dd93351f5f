//! The Allow operation on a manual clock: the design doc's scenarios, the
//! lookup order, max debt, the per-request max wait, reload, idle removal
//! and bad input, with exact numbers.

use std::sync::Arc;
use std::time::Duration;

use tollgate::quota::config::Config;
use tollgate::quota::{Kind, Limits, Quota, Request, Status};
use tollgate::ManualClock;

const MS: Duration = Duration::from_millis(1);

fn quota(yaml: &str) -> (Quota, ManualClock) {
    quota_with(yaml, Limits::default())
}

fn quota_with(yaml: &str, limits: Limits) -> (Quota, ManualClock) {
    let clock = ManualClock::new();
    let config = Config::from_yaml(yaml).unwrap();
    (Quota::new(config, limits, Arc::new(clock.clone())), clock)
}

fn allow(q: &Quota, ns: &str, b: &str, tokens: i64) -> (Status, i64, i64) {
    let d = q.allow(&Request::new(ns, b, tokens));
    (d.status, d.tokens_granted, d.wait_millis())
}

const PINKY: &str = "\
namespaces:
  Pinky_TheBrain:
    buckets:
      UserService_getUser: {size: 1, fill_rate: 10, wait_timeout_millis: 150}
      prefetch: {size: 10, fill_rate: 10, max_debt_millis: 2000, wait_timeout_millis: 2000}
      cpu_millis: {size: 1000, fill_rate: 1000, wait_timeout_millis: 5000}
";

#[test]
fn scenario_ok_and_ok_with_wait() {
    let (q, clock) = quota(PINKY);
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "UserService_getUser", 1),
        (Status::Ok, 1, 0)
    );
    // No token on hand: OK, wait 100 ms for it.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "UserService_getUser", 1),
        (Status::Ok, 1, 100)
    );
    clock.advance(60 * MS);
    // The debt is 40 ms more, plus this token's 100 ms.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "UserService_getUser", 1),
        (Status::Ok, 1, 140)
    );
}

#[test]
fn scenario_no_bucket() {
    let (q, _) = quota(PINKY);
    assert_eq!(
        allow(&q, "Pinky_TheBrain2", "x", 1),
        (Status::RejectedNoBucket, 0, 0)
    );
    // A known namespace without default or template: no bucket either.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "nope", 1),
        (Status::RejectedNoBucket, 0, 0)
    );
    assert!(q.metrics().render().contains(
        "tollgate_quota_bucket_misses{namespace=\"___UNKNOWN___\",reason=\"no_bucket\"} 1"
    ));
}

#[test]
fn scenario_wait_beyond_max_claims_nothing() {
    let (q, clock) = quota(PINKY);
    let b = "UserService_getUser";
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1).2, 0);
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1).2, 100);
    // 200 ms > the 150 ms wait timeout: rejected, and nothing is claimed...
    assert_eq!(
        allow(&q, "Pinky_TheBrain", b, 1),
        (Status::RejectedTimeout, 0, 0)
    );
    assert_eq!(
        allow(&q, "Pinky_TheBrain", b, 1),
        (Status::RejectedTimeout, 0, 0)
    );
    // ...so 50 ms later the next token is 150 ms out, within the timeout.
    clock.advance(50 * MS);
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1), (Status::Ok, 1, 150));
}

#[test]
fn scenario_prefetch_of_ten() {
    let (q, clock) = quota(PINKY);
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 10),
        (Status::Ok, 10, 0)
    );
    // Used up locally; the next ten are a second away.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 10),
        (Status::Ok, 10, 1000)
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 10),
        (Status::Ok, 10, 1000)
    );
    // 11 > max_tokens_per_request (the fill rate, 10).
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 11),
        (Status::RejectedTooManyTokensRequested, 0, 0)
    );
}

#[test]
fn scenario_post_accounting() {
    // One token is one millisecond of the resource's time; 1000/s is one
    // resource kept busy.
    let (q, clock) = quota(PINKY);
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 1),
        (Status::Ok, 1, 0)
    );
    clock.advance(400 * MS); // full again: 1000 on hand
                             // The call took 1300 ms: post-account the 1299 beyond the first token,
                             // in requests of at most max_tokens_per_request (the fill rate, 1000).
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 1299).0,
        Status::RejectedTooManyTokensRequested
    );
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 1000),
        (Status::Ok, 1000, 0)
    );
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 299),
        (Status::Ok, 299, 299)
    );
    // The next caller waits for the debt.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 1),
        (Status::Ok, 1, 300)
    );
}

#[test]
fn polling_every_99_ms_gets_ten_per_second() {
    let (q, clock) = quota("global_default_bucket: {size: 10, fill_rate: 10}\n");
    let mut granted = 0;
    for poll in 0..=1010 {
        if poll > 0 {
            clock.advance(99 * MS);
        }
        let d = q.allow(&Request::new("svc", "poll", 1).max_wait_millis(0));
        if d.status == Status::Ok {
            granted += 1;
        }
    }
    // 10 at the start + 1010 * 0.99 earned = 1009.9 over 99.99 s.
    assert_eq!(granted, 1009);
}

const LOOKUP: &str = "\
global_default_bucket: {size: 1}
namespaces:
  named_and_default:
    default_bucket: {size: 2}
    buckets:
      mine: {size: 3}
  dynamic:
    dynamic_bucket_template: {size: 4}
    buckets:
      mine: {size: 5}
  bare:
    buckets:
      mine: {size: 6}
";

#[test]
fn lookup_order_named_default_dynamic_global() {
    let cases = [
        (
            "named_and_default",
            "mine",
            "named_and_default",
            "mine",
            Kind::Named,
            3,
        ),
        (
            "named_and_default",
            "other",
            "named_and_default",
            "___DEFAULT_BUCKET___",
            Kind::NamespaceDefault,
            2,
        ),
        ("dynamic", "mine", "dynamic", "mine", Kind::Named, 5),
        ("dynamic", "other", "dynamic", "other", Kind::Dynamic, 4),
        ("bare", "mine", "bare", "mine", Kind::Named, 6),
        (
            "bare",
            "other",
            "___GLOBAL___",
            "___DEFAULT_BUCKET___",
            Kind::GlobalDefault,
            1,
        ),
        (
            "unknown",
            "x",
            "___GLOBAL___",
            "___DEFAULT_BUCKET___",
            Kind::GlobalDefault,
            1,
        ),
    ];
    for (ns, name, key_ns, key_name, kind, size) in cases {
        let (q, _) = quota(LOOKUP);
        // The sizes differ: the whole size is on hand only in the right bucket.
        let d = q.allow(&Request::new(ns, name, size).max_wait_millis(0));
        assert_eq!(d.status, Status::Ok, "{ns}:{name}");
        let list = q.registry().list(10);
        assert_eq!(list.len(), 1, "{ns}:{name}");
        let (n, b, k, left) = &list[0];
        assert_eq!(
            (n.as_str(), b.as_str(), *k, *left),
            (key_ns, key_name, kind, 0),
            "{ns}:{name}"
        );
        assert_eq!(
            q.allow(&Request::new(ns, name, 1).max_wait_millis(0))
                .status,
            Status::RejectedTimeout
        );
    }
}

#[test]
fn max_debt_caps_the_wait_and_refuses_beyond() {
    let (q, clock) = quota(
        "global_default_bucket: {size: 5, fill_rate: 10, max_debt_millis: 1000, wait_timeout_millis: 5000, max_tokens_per_request: 100}\n",
    );
    assert_eq!(allow(&q, "a", "b", 5), (Status::Ok, 5, 0));
    assert_eq!(allow(&q, "a", "b", 10), (Status::Ok, 10, 1000));
    assert_eq!(allow(&q, "a", "b", 1), (Status::RejectedTimeout, 0, 0));
    clock.advance(100 * MS);
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 1000));
    assert!(q
        .metrics()
        .render()
        .contains("tollgate_quota_timeouts{namespace=\"___GLOBAL___\"} 1"));
}

#[test]
fn the_per_request_max_wait_lowers_never_raises() {
    let (q, _) =
        quota("global_default_bucket: {size: 1, fill_rate: 10, wait_timeout_millis: 300}\n");
    assert_eq!(allow(&q, "a", "b", 1).0, Status::Ok);
    let req = |ms| q.allow(&Request::new("a", "b", 1).max_wait_millis(ms));
    assert_eq!(req(99).status, Status::RejectedTimeout); // lowered below 100 ms
    assert_eq!(req(100).status, Status::Ok);
    assert_eq!(req(10_000).wait_millis(), 200);
    assert_eq!(req(10_000).wait_millis(), 300);
    // 400 ms: the override of 10 s does not raise the bucket's 300 ms.
    assert_eq!(req(10_000).status, Status::RejectedTimeout);
    assert_eq!(req(-1).status, Status::RejectedInvalidRequest);
}

#[test]
fn sub_millisecond_waits_round_up() {
    let (q, clock) = quota("global_default_bucket: {size: 1, fill_rate: 1000}\n");
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    clock.advance(Duration::from_micros(999));
    let d = q.allow(&Request::new("a", "b", 1));
    assert_eq!(d.wait, Duration::from_micros(1));
    assert_eq!(d.wait_millis(), 1);
}

#[test]
fn reload_keeps_bucket_state() {
    let (q, clock) = quota("namespaces:\n  a:\n    buckets:\n      b: {size: 10, fill_rate: 10}\n");
    assert_eq!(allow(&q, "a", "b", 10), (Status::Ok, 10, 0));
    let removed = q.reload(
        Config::from_yaml("namespaces:\n  a:\n    buckets:\n      b: {size: 20, fill_rate: 20}\n")
            .unwrap(),
    );
    assert_eq!(removed, 0);
    // Still empty: the reload refilled nothing; the new rate applies.
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 50));
    clock.advance(Duration::from_secs(2));
    assert_eq!(allow(&q, "a", "b", 20), (Status::Ok, 20, 0));
    // Removed from the configuration: gone.
    let removed = q.reload(Config::from_yaml("namespaces:\n  a:\n    buckets: {}\n").unwrap());
    assert_eq!(removed, 1);
    assert_eq!(allow(&q, "a", "b", 1).0, Status::RejectedNoBucket);
    assert_eq!(q.registry().len(), 0);
}

#[test]
fn idle_buckets_are_reaped_and_recreated_full() {
    let (q, clock) = quota(
        "namespaces:\n  logins:\n    max_dynamic_buckets: 3\n    dynamic_bucket_template: {size: 1, fill_rate: 1, max_idle_millis: 1000}\n",
    );
    for user in ["u1", "u2", "u3"] {
        assert_eq!(allow(&q, "logins", user, 1), (Status::Ok, 1, 0));
    }
    assert_eq!(
        allow(&q, "logins", "u4", 1),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
    clock.advance(999 * MS);
    assert_eq!(allow(&q, "logins", "u1", 1), (Status::Ok, 1, 1));
    clock.advance(MS);
    assert_eq!(q.reap(), 2); // u2 and u3; u1 was used 1 ms ago
    assert_eq!(q.registry().dynamic_count("logins"), 1);
    assert_eq!(allow(&q, "logins", "u4", 1), (Status::Ok, 1, 0));
    assert_eq!(allow(&q, "logins", "u2", 1), (Status::Ok, 1, 0)); // recreated full
    assert_eq!(
        allow(&q, "logins", "u3", 1),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
    let text = q.metrics().render();
    assert!(text.contains("tollgate_quota_buckets_created{namespace=\"logins\"} 5"));
    assert!(text.contains("tollgate_quota_buckets_removed{namespace=\"logins\"} 2"));
    assert!(text.contains("tollgate_quota_buckets 3"));
}

#[test]
fn bad_input_gets_the_right_status() {
    let (q, _) = quota(PINKY);
    let ns = "Pinky_TheBrain";
    let b = "UserService_getUser";
    for (ns, b) in [
        ("", b),
        (ns, ""),
        ("Pinky:TheBrain", b),
        (ns, "a b"),
        (ns, "caf\u{e9}"),
    ] {
        assert_eq!(
            allow(&q, ns, b, 1),
            (Status::RejectedInvalidRequest, 0, 0),
            "{ns:?} {b:?}"
        );
    }
    let long = "x".repeat(129);
    assert_eq!(allow(&q, &long, b, 1).0, Status::RejectedInvalidRequest);
    assert_eq!(allow(&q, ns, b, -1).0, Status::RejectedInvalidRequest);
    assert_eq!(allow(&q, ns, b, i64::MIN).0, Status::RejectedInvalidRequest);
    assert_eq!(
        allow(&q, ns, b, i64::MAX).0,
        Status::RejectedTooManyTokensRequested
    );
    assert_eq!(
        allow(&q, ns, b, 11).0,
        Status::RejectedTooManyTokensRequested
    );
    // 0 tokens means 1, as in the reference.
    assert_eq!(allow(&q, ns, b, 0), (Status::Ok, 1, 0));
    assert!(q
        .metrics()
        .render()
        .contains("tollgate_quota_invalid_requests 8"));
}

#[test]
fn huge_token_counts_within_a_huge_max_are_refused_not_overflowed() {
    let (q, _) = quota(&format!(
        "global_default_bucket: {{size: 1, fill_rate: 1, max_tokens_per_request: {}}}\n",
        i64::MAX
    ));
    assert_eq!(
        allow(&q, "a", "b", i64::MAX),
        (Status::RejectedTooManyTokensRequested, 0, 0)
    );
    assert_eq!(
        allow(&q, "a", "b", 1 << 40),
        (Status::RejectedTimeout, 0, 0)
    );
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
}

#[test]
fn a_million_dynamic_names_stay_within_the_cap() {
    let (q, clock) = quota(
        "namespaces:\n  ips:\n    max_dynamic_buckets: 1000\n    dynamic_bucket_template: {size: 1, fill_rate: 1, max_idle_millis: 50}\n",
    );
    let mut ok = 0;
    let mut too_many = 0;
    for i in 0..1_000_000u32 {
        let name = format!("ip{i}");
        match q.allow(&Request::new("ips", &name, 1)).status {
            Status::Ok => ok += 1,
            Status::RejectedTooManyBuckets => too_many += 1,
            other => panic!("unexpected {other:?}"),
        }
        clock.advance(Duration::from_micros(1));
        if i % 100_000 == 99_999 {
            assert_eq!(q.registry().len(), 1000);
            assert_eq!(q.reap(), 1000); // all idle for >= 50 ms
        }
    }
    assert_eq!((ok, too_many), (10_000, 990_000));
    assert_eq!(q.registry().len(), 0);
}

#[test]
fn the_server_cap_bounds_namespaces_without_one() {
    let (q, _) = quota_with(
        "namespaces:\n  ips:\n    dynamic_bucket_template: {size: 1}\n",
        Limits {
            default_max_dynamic_buckets: 500,
        },
    );
    let ok = (0..2000)
        .filter(|i| q.allow(&Request::new("ips", &format!("n{i}"), 1)).status == Status::Ok)
        .count();
    assert_eq!(ok, 500);
    assert_eq!(q.registry().dynamic_count("ips"), 500);
}
