//! The Allow operation on a manual clock: the design doc's scenarios and
//! the reference quotaservice's answers (debt paid by the next caller, max
//! wait and max debt, lookup order, names, dynamic caps, wait truncation,
//! zero tokens), the places where tollgate answers differently on purpose,
//! reload, idle removal and bad input, with exact numbers.

use std::sync::Arc;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_quota::pb::{self, allow_response, AllowResponse};
use tollgate_quota::{AllowRequest, BucketKind, Quota, QuotaConfig, QuotaLimits, Status};

const MS: Duration = Duration::from_millis(1);

fn quota(yaml: &str) -> (Quota, ManualClock) {
    quota_with(yaml, QuotaLimits::default())
}

fn quota_with(yaml: &str, limits: QuotaLimits) -> (Quota, ManualClock) {
    let clock = ManualClock::new();
    let config = QuotaConfig::from_yaml(yaml).unwrap();
    (Quota::new(config, limits, Arc::new(clock.clone())), clock)
}

fn allow(q: &Quota, ns: &str, b: &str, tokens: i64) -> (Status, i64, i64) {
    let d = q.allow(&AllowRequest::new(ns, b, tokens));
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
    // No token on hand: granted at once, borrowing the next 100 ms...
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "UserService_getUser", 1),
        (Status::Ok, 1, 0)
    );
    // ...which the next caller waits for.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "UserService_getUser", 1),
        (Status::Ok, 1, 100)
    );
    clock.advance(60 * MS);
    // 200 ms were owed; 60 ms later, 140 ms.
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
        "tollgate_quota_bucket_misses_total{namespace=\"___UNKNOWN___\",reason=\"no_bucket\"} 1"
    ));
}

#[test]
fn scenario_wait_beyond_max_claims_nothing() {
    let (q, clock) = quota(PINKY);
    let b = "UserService_getUser";
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1).2, 0);
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1).2, 0);
    assert_eq!(allow(&q, "Pinky_TheBrain", b, 1).2, 100);
    // 200 ms owed > the 150 ms wait timeout: rejected, nothing claimed...
    assert_eq!(
        allow(&q, "Pinky_TheBrain", b, 1),
        (Status::RejectedTimeout, 0, 0)
    );
    assert_eq!(
        allow(&q, "Pinky_TheBrain", b, 1),
        (Status::RejectedTimeout, 0, 0)
    );
    // ...so 50 ms later 150 ms are owed, within the timeout.
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
    // Nothing on hand: the next ten are borrowed, a second of debt...
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 10),
        (Status::Ok, 10, 0)
    );
    // ...which the next prefetch waits for; two seconds is the max debt.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 10),
        (Status::Ok, 10, 1000)
    );
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "prefetch", 1),
        (Status::RejectedTimeout, 0, 0)
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
        (Status::Ok, 299, 0)
    );
    // The next caller waits for the debt.
    assert_eq!(
        allow(&q, "Pinky_TheBrain", "cpu_millis", 1),
        (Status::Ok, 1, 299)
    );
}

/// Buckets that fill at 1 token/s, as in the comparison with the
/// reference.
const SLOW: &str = "\
namespaces:
  svc:
    buckets:
      two: {size: 2, fill_rate: 1, wait_timeout_millis: 2500}
      prefetch: {size: 2, fill_rate: 1, max_tokens_per_request: 5, wait_timeout_millis: 5000}
      debt: {size: 1, fill_rate: 1, max_debt_millis: 2000, max_tokens_per_request: 5}
  dflt:
    default_bucket: {size: 2, fill_rate: 1, wait_timeout_millis: 2500}
";

/// The reference's debt rule: a request is granted what has accumulated
/// and borrows the rest, and its own wait is the debt owed *before* it.
#[test]
fn the_debt_is_paid_by_the_next_caller() {
    for (ns, b) in [("svc", "two"), ("dflt", "anything")] {
        let (q, _) = quota(SLOW);
        let answers: Vec<_> = (0..6).map(|_| allow(&q, ns, b, 1)).collect();
        assert_eq!(
            answers,
            [
                (Status::Ok, 1, 0),
                (Status::Ok, 1, 0),
                (Status::Ok, 1, 0),
                (Status::Ok, 1, 1000),
                (Status::Ok, 1, 2000),
                // 3000 ms owed > the 2500 ms wait timeout.
                (Status::RejectedTimeout, 0, 0),
            ],
            "{ns}:{b}"
        );
    }
}

#[test]
fn a_prefetch_borrows_and_the_next_caller_waits() {
    let (q, _) = quota(SLOW);
    assert_eq!(allow(&q, "svc", "prefetch", 5), (Status::Ok, 5, 0));
    assert_eq!(allow(&q, "svc", "prefetch", 1), (Status::Ok, 1, 3000));
}

/// `max_debt_millis` bounds the debt a request leaves, not its wait.
#[test]
fn max_debt_bounds_the_debt_left_behind() {
    let (q, clock) = quota(SLOW);
    // 4 tokens from a size-1 bucket would leave 3 s owed: over 2 s.
    assert_eq!(allow(&q, "svc", "debt", 4), (Status::RejectedTimeout, 0, 0));
    // 3 leave exactly 2 s: granted, and at once.
    assert_eq!(allow(&q, "svc", "debt", 3), (Status::Ok, 3, 0));
    assert_eq!(allow(&q, "svc", "debt", 1), (Status::RejectedTimeout, 0, 0));
    clock.advance(Duration::from_secs(1));
    // 1 s owed, within the 1 s wait timeout; 2 s left behind.
    assert_eq!(allow(&q, "svc", "debt", 1), (Status::Ok, 1, 1000));
    assert!(q
        .metrics()
        .render()
        .contains("tollgate_quota_timeouts_total{namespace=\"svc\"} 2"));
}

/// The per-request max wait is checked against the debt owed before the
/// request, replaces the bucket's only when lower, and a negative one means
/// "only while nothing is owed".
#[test]
fn the_max_wait_override_is_checked_against_the_earlier_debt() {
    let (q, _) =
        quota("global_default_bucket: {size: 1, fill_rate: 10, wait_timeout_millis: 300}\n");
    let req = |ms| {
        let d = q.allow(&AllowRequest::new("a", "b", 1).max_wait_millis(ms));
        (d.status, d.wait_millis())
    };
    assert_eq!(req(0), (Status::Ok, 0));
    assert_eq!(req(0), (Status::Ok, 0)); // nothing owed before it
    assert_eq!(req(99), (Status::RejectedTimeout, 0)); // 100 ms owed
    assert_eq!(req(100), (Status::Ok, 100));
    assert_eq!(req(10_000), (Status::Ok, 200));
    assert_eq!(req(10_000), (Status::Ok, 300));
    // 400 ms: the override of 10 s does not raise the bucket's 300 ms.
    assert_eq!(req(10_000), (Status::RejectedTimeout, 0));

    let (q, _) = quota("global_default_bucket: {size: 1, fill_rate: 10}\n");
    let req = |ms| {
        q.allow(&AllowRequest::new("a", "b", 1).max_wait_millis(ms))
            .status
    };
    assert_eq!(req(-1), Status::Ok); // on hand
    assert_eq!(req(-5), Status::Ok); // borrowed
    assert_eq!(req(-1), Status::RejectedTimeout); // 100 ms owed
}

/// On the wire, `max_wait_millis_override` counts only with
/// `max_wait_time_override: true`.
#[test]
fn the_override_counts_only_with_its_flag() {
    let (q, _) =
        quota("global_default_bucket: {size: 1, fill_rate: 10, wait_timeout_millis: 300}\n");
    let wire = |override_ms, flag| {
        let req = pb::AllowRequest {
            namespace: "a".into(),
            bucket_name: "b".into(),
            tokens_requested: 1,
            max_wait_millis_override: override_ms,
            max_wait_time_override: flag,
        };
        let resp = AllowResponse::from(q.allow(&AllowRequest::from(&req)));
        (
            allow_response::Status::try_from(resp.status).unwrap(),
            resp.wait_millis,
        )
    };
    assert_eq!(wire(0, false), (allow_response::Status::Ok, 0));
    assert_eq!(wire(0, false), (allow_response::Status::Ok, 0));
    // 100 ms owed: an override of 0 without its flag is ignored...
    assert_eq!(wire(0, false), (allow_response::Status::Ok, 100));
    // ...and with it, refuses.
    assert_eq!(wire(0, true), (allow_response::Status::RejectedTimeout, 0));
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

/// The reference's lookup: the named bucket, a dynamic bucket, the
/// namespace's default; the global default only for namespaces that do not
/// exist.
#[test]
fn lookup_order_named_dynamic_default_and_global_for_unknown_namespaces() {
    let cases = [
        (
            "named_and_default",
            "mine",
            "named_and_default",
            "mine",
            BucketKind::Named,
            3,
        ),
        (
            "named_and_default",
            "other",
            "named_and_default",
            "___DEFAULT_BUCKET___",
            BucketKind::NamespaceDefault,
            2,
        ),
        ("dynamic", "mine", "dynamic", "mine", BucketKind::Named, 5),
        (
            "dynamic",
            "other",
            "dynamic",
            "other",
            BucketKind::Dynamic,
            4,
        ),
        ("bare", "mine", "bare", "mine", BucketKind::Named, 6),
        (
            "unknown",
            "x",
            "___GLOBAL___",
            "___DEFAULT_BUCKET___",
            BucketKind::GlobalDefault,
            1,
        ),
    ];
    for (ns, name, key_ns, key_name, kind, size) in cases {
        let (q, _) = quota(LOOKUP);
        // The sizes differ: the whole size is on hand only in the right
        // bucket, and a token more is then borrowed at once.
        let d = q.allow(&AllowRequest::new(ns, name, size).max_wait_millis(0));
        assert_eq!(d.status, Status::Ok, "{ns}:{name}");
        let list = q.registry().list(10);
        assert_eq!(list.len(), 1, "{ns}:{name}");
        let (n, b, k, left) = &list[0];
        assert_eq!(
            (n.as_str(), b.as_str(), *k, *left),
            (key_ns, key_name, kind, 0),
            "{ns}:{name}"
        );
        assert_eq!(allow(&q, ns, name, 1), (Status::Ok, 1, 0), "{ns}:{name}");
        assert_eq!(q.registry().list(10)[0].3, -1, "{ns}:{name}");
    }
    // A name a known namespace does not serve is refused there: the global
    // default bucket is not used.
    let (q, _) = quota(LOOKUP);
    assert_eq!(
        allow(&q, "bare", "other", 1),
        (Status::RejectedNoBucket, 0, 0)
    );
    assert_eq!(q.registry().len(), 0);
    assert!(q
        .metrics()
        .render()
        .contains("tollgate_quota_bucket_misses_total{namespace=\"bare\",reason=\"no_bucket\"} 1"));
}

/// Any non-empty name up to 256 bytes, as in the reference.
#[test]
fn names_are_any_non_empty_string() {
    let (q, _) = quota(
        "global_default_bucket: {size: 5}\nnamespaces:\n  good.ns:\n    buckets:\n      my-bucket: {size: 3}\n",
    );
    assert_eq!(allow(&q, "good.ns", "my-bucket", 3), (Status::Ok, 3, 0));
    // An unknown namespace: the global default; a name a known namespace
    // does not serve: no bucket.
    assert_eq!(allow(&q, "bad.ns", "x", 5), (Status::Ok, 5, 0));
    assert_eq!(
        allow(&q, "good.ns", "bad-name", 1),
        (Status::RejectedNoBucket, 0, 0)
    );
    for (ns, b) in [("Pinky:TheBrain", "a b"), ("caf\u{e9}", "x"), ("s p", "?")] {
        assert_eq!(allow(&q, ns, b, 0).0, Status::Ok, "{ns:?} {b:?}");
    }
    let longest = "x".repeat(256);
    assert_eq!(allow(&q, &longest, &longest, 0).0, Status::Ok);
    let long = "x".repeat(257);
    assert_eq!(
        allow(&q, &long, "b", 1),
        (Status::RejectedInvalidRequest, 0, 0)
    );
    assert_eq!(
        allow(&q, "good.ns", &long, 1),
        (Status::RejectedInvalidRequest, 0, 0)
    );
}

/// `max_dynamic_buckets: 0` is no cap of the namespace's own: only the
/// server-wide one, shared by every namespace.
#[test]
fn max_dynamic_buckets_zero_leaves_only_the_server_cap() {
    let (q, _) = quota("namespaces:\n  ips:\n    dynamic_bucket_template: {size: 1}\n");
    let ok = (0..100_001)
        .filter(|i| {
            q.allow(&AllowRequest::new("ips", &format!("n{i}"), 1))
                .status
                == Status::Ok
        })
        .count();
    assert_eq!(ok, 100_001);
    assert_eq!(q.registry().dynamic_total(), 100_001);

    let (q, _) = quota_with(
        "namespaces:\n  a:\n    dynamic_bucket_template: {size: 1}\n  b:\n    max_dynamic_buckets: 1000\n    dynamic_bucket_template: {size: 1}\n",
        QuotaLimits {
            max_dynamic_buckets: 500,
        },
    );
    for i in 0..300 {
        assert_eq!(allow(&q, "a", &format!("n{i}"), 1).0, Status::Ok);
    }
    let b_ok = (0..1000)
        .filter(|i| allow(&q, "b", &format!("n{i}"), 1).0 == Status::Ok)
        .count();
    assert_eq!(b_ok, 200);
    assert_eq!(
        allow(&q, "a", "one_more", 1),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
    assert_eq!(
        (
            q.registry().dynamic_count("a"),
            q.registry().dynamic_total()
        ),
        (300, 500)
    );
}

/// Waits are reported in whole milliseconds rounded down, as the reference
/// reports them; the exact wait is kept.
#[test]
fn wait_millis_are_truncated() {
    let (q, clock) = quota("global_default_bucket: {size: 1, fill_rate: 1}\n");
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    clock.advance(Duration::from_micros(1));
    let d = q.allow(&AllowRequest::new("a", "b", 1));
    assert_eq!(d.wait, Duration::from_micros(999_999));
    assert_eq!((d.status, d.wait_millis()), (Status::Ok, 999));
}

/// `tokens_requested: 0` (proto3's default for an unset field) takes one
/// token and is answered `tokens_granted: 0`, as in the reference.
#[test]
fn zero_tokens_take_one_and_report_zero() {
    let (q, _) = quota("global_default_bucket: {size: 2, fill_rate: 1}\n");
    assert_eq!(allow(&q, "a", "b", 0), (Status::Ok, 0, 0));
    assert_eq!(allow(&q, "a", "b", 0), (Status::Ok, 0, 0));
    assert_eq!(allow(&q, "a", "b", 0), (Status::Ok, 0, 0)); // borrowed
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 1000));
    assert_eq!(q.registry().list(1)[0].3, -2);
}

/// Where tollgate answers differently on purpose: exact refill. Polled
/// every 99 ms with no wait allowed, a size-2 bucket at 10/s admits 10/s
/// here; the reference, which drops the part of a token earned between
/// polls, admits every other poll (about 5/s).
#[test]
fn polling_every_99_ms_gets_ten_per_second() {
    let (q, clock) = quota("global_default_bucket: {size: 2, fill_rate: 10}\n");
    let mut granted = 0;
    for poll in 0..=1010 {
        if poll > 0 {
            clock.advance(99 * MS);
        }
        let d = q.allow(&AllowRequest::new("svc", "poll", 1).max_wait_millis(0));
        if d.status == Status::Ok {
            granted += 1;
        }
    }
    // 2 at the start + 1010 * 0.99 earned = 1001.9 over 99.99 s, and a
    // poll is granted while nothing is owed: 0.1 is owed at the end.
    assert_eq!(granted, 1002);
    assert_eq!(q.registry().list(1)[0].3, -1);
}

/// Where tollgate answers differently on purpose: a fractional fill rate
/// is kept (the reference's YAML reader truncates 0.5 to 0 and then
/// applies its default of 50/s).
#[test]
fn fractional_fill_rates_are_kept() {
    let (q, _) =
        quota("global_default_bucket: {size: 1, fill_rate: 0.5, wait_timeout_millis: 5000}\n");
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 2000));
}

/// Where tollgate answers differently on purpose: a request refused for
/// too many tokens never takes a dynamic bucket slot (the reference creates
/// the bucket first).
#[test]
fn a_request_with_too_many_tokens_uses_no_dynamic_slot() {
    let (q, _) = quota(
        "namespaces:\n  ips:\n    max_dynamic_buckets: 1\n    dynamic_bucket_template: {size: 5, max_tokens_per_request: 5}\n",
    );
    assert_eq!(
        allow(&q, "ips", "a", 6),
        (Status::RejectedTooManyTokensRequested, 0, 0)
    );
    assert_eq!(q.registry().dynamic_count("ips"), 0);
    assert_eq!(allow(&q, "ips", "b", 1), (Status::Ok, 1, 0));
    assert_eq!(
        allow(&q, "ips", "a", 1),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
}

/// As the reference, which looks the bucket up first: at the namespace's
/// cap, a new dynamic bucket asking too many tokens is refused for the
/// cap; the bucket already there is refused for the tokens.
#[test]
fn at_the_cap_a_new_bucket_with_too_many_tokens_is_too_many_buckets() {
    let (q, _) = quota(
        "namespaces:\n  ips:\n    max_dynamic_buckets: 1\n    dynamic_bucket_template: {size: 5, max_tokens_per_request: 5}\n",
    );
    assert_eq!(allow(&q, "ips", "a", 1), (Status::Ok, 1, 0));
    assert_eq!(
        allow(&q, "ips", "b", 6),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
    assert_eq!(
        allow(&q, "ips", "a", 6),
        (Status::RejectedTooManyTokensRequested, 0, 0)
    );
    // The server-wide cap, likewise.
    let (q, _) = quota_with(
        "namespaces:\n  ips:\n    max_dynamic_buckets: 5\n    dynamic_bucket_template: {size: 5, max_tokens_per_request: 5}\n",
        QuotaLimits { max_dynamic_buckets: 1 },
    );
    assert_eq!(allow(&q, "ips", "a", 1), (Status::Ok, 1, 0));
    assert_eq!(
        allow(&q, "ips", "b", 6),
        (Status::RejectedTooManyBuckets, 0, 0)
    );
    assert_eq!(q.registry().dynamic_count("ips"), 1);
}

/// Where tollgate answers differently on purpose: a configuration the
/// reference panics on is a one-line error.
#[test]
fn a_namespace_with_default_and_template_is_a_one_line_error() {
    let err = QuotaConfig::from_yaml(
        "namespaces:\n  a:\n    default_bucket: {}\n    dynamic_bucket_template: {}\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "namespace \"a\": default_bucket: a namespace may have a default bucket or a dynamic_bucket_template, not both"
    );
}

/// A configuration in the shape of the reference's own example, with its
/// `test.namespace`, loads and serves.
#[test]
fn the_reference_style_example_configuration_serves() {
    let (q, _) = quota(include_str!("../examples/quota-test-namespace.yaml"));
    let ns = "test.namespace";
    let answers: Vec<_> = (0..4).map(|_| allow(&q, ns, "one", 1)).collect();
    assert_eq!(
        answers,
        [
            (Status::Ok, 1, 0),
            (Status::Ok, 1, 0),
            (Status::Ok, 1, 0),
            (Status::Ok, 1, 1000)
        ]
    );
    assert_eq!(allow(&q, ns, "xyz", 50), (Status::Ok, 50, 0));
    assert_eq!(allow(&q, ns, "user.42", 50), (Status::Ok, 50, 0));
    assert_eq!(q.registry().dynamic_count(ns), 1);
    assert_eq!(allow(&q, "other", "x", 1), (Status::RejectedNoBucket, 0, 0));
}

#[test]
fn reload_keeps_bucket_state() {
    let (q, clock) = quota("namespaces:\n  a:\n    buckets:\n      b: {size: 10, fill_rate: 10}\n");
    assert_eq!(allow(&q, "a", "b", 10), (Status::Ok, 10, 0));
    let removed = q.reload(
        QuotaConfig::from_yaml(
            "namespaces:\n  a:\n    buckets:\n      b: {size: 20, fill_rate: 20}\n",
        )
        .unwrap(),
    );
    assert_eq!(removed, 0);
    // Still empty: the reload refilled nothing; the new rate applies.
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 0));
    assert_eq!(allow(&q, "a", "b", 1), (Status::Ok, 1, 50));
    clock.advance(Duration::from_secs(2));
    assert_eq!(allow(&q, "a", "b", 20), (Status::Ok, 20, 0));
    // Removed from the configuration: gone.
    let removed = q.reload(QuotaConfig::from_yaml("namespaces:\n  a:\n    buckets: {}\n").unwrap());
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
    assert_eq!(allow(&q, "logins", "u1", 1), (Status::Ok, 1, 0));
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
    assert!(text.contains("tollgate_quota_buckets_created_total{namespace=\"logins\"} 5"));
    assert!(text.contains("tollgate_quota_buckets_removed_total{namespace=\"logins\"} 2"));
    assert!(text.contains("tollgate_quota_buckets 3"));
}

#[test]
fn bad_input_gets_the_right_status() {
    let (q, _) = quota(PINKY);
    let ns = "Pinky_TheBrain";
    let b = "UserService_getUser";
    let long = "x".repeat(257);
    for (ns, b) in [("", b), (ns, ""), (&long, b), (ns, &long)] {
        assert_eq!(
            allow(&q, ns, b, 1),
            (Status::RejectedInvalidRequest, 0, 0),
            "{ns:?} {b:?}"
        );
    }
    // Negative tokens are refused (the reference would echo them as
    // granted).
    assert_eq!(allow(&q, ns, b, -5), (Status::RejectedInvalidRequest, 0, 0));
    assert_eq!(allow(&q, ns, b, i64::MIN).0, Status::RejectedInvalidRequest);
    assert_eq!(
        allow(&q, ns, b, i64::MAX).0,
        Status::RejectedTooManyTokensRequested
    );
    assert_eq!(
        allow(&q, ns, b, 11).0,
        Status::RejectedTooManyTokensRequested
    );
    assert!(q
        .metrics()
        .render()
        .contains("tollgate_quota_invalid_requests_total 6"));
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
        match q.allow(&AllowRequest::new("ips", &name, 1)).status {
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
        QuotaLimits {
            max_dynamic_buckets: 500,
        },
    );
    let ok = (0..2000)
        .filter(|i| {
            q.allow(&AllowRequest::new("ips", &format!("n{i}"), 1))
                .status
                == Status::Ok
        })
        .count();
    assert_eq!(ok, 500);
    assert_eq!(q.registry().dynamic_count("ips"), 500);
}

/// Every answer is counted under its status and its decision timed (on
/// the service's clock: a manual one that does not move puts every
/// decision in the first bucket).
#[test]
fn every_answer_is_counted_by_status_and_timed() {
    let (q, _) = quota(PINKY);
    let ns = "Pinky_TheBrain";
    let b = "UserService_getUser";
    assert_eq!(allow(&q, ns, b, 1).0, Status::Ok);
    assert_eq!(allow(&q, ns, b, 1).0, Status::Ok);
    assert_eq!(allow(&q, ns, b, 1), (Status::Ok, 1, 100));
    assert_eq!(allow(&q, ns, b, 1).0, Status::RejectedTimeout);
    assert_eq!(allow(&q, "nope", b, 1).0, Status::RejectedNoBucket);
    assert_eq!(
        allow(&q, ns, b, 11).0,
        Status::RejectedTooManyTokensRequested
    );
    assert_eq!(allow(&q, ns, b, -1).0, Status::RejectedInvalidRequest);
    let text = q.metrics().render();
    for (status, n) in [
        ("OK", 3),
        ("REJECTED_TIMEOUT", 1),
        ("REJECTED_NO_BUCKET", 1),
        ("REJECTED_TOO_MANY_BUCKETS", 0),
        ("REJECTED_TOO_MANY_TOKENS_REQUESTED", 1),
        ("REJECTED_INVALID_REQUEST", 1),
        ("REJECTED_SERVER_ERROR", 0),
    ] {
        let line = format!("tollgate_quota_requests_total{{status=\"{status}\"}} {n}\n");
        assert!(text.contains(&line), "{line}{text}");
    }
    assert!(
        text.contains("tollgate_quota_allow_duration_seconds_bucket{le=\"0.0000001\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_quota_allow_duration_seconds_count 7\n"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_quota_allow_duration_seconds_sum 0\n"),
        "{text}"
    );
}

/// Prometheus' naming: every counter ends in `_total`, every histogram
/// (a time) in `_seconds`.
#[test]
fn metric_names_follow_prometheus_conventions() {
    let (q, _) = quota(PINKY);
    // One of each outcome, so every labelled family has a series.
    allow(&q, "Pinky_TheBrain", "UserService_getUser", 1);
    allow(&q, "nope", "x", 1);
    let text = q.metrics().render();
    let mut seen = 0;
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut words = line.split_whitespace().skip(2);
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        match kind {
            "counter" => assert!(name.ends_with("_total"), "{line}"),
            "histogram" => assert!(name.ends_with("_seconds"), "{line}"),
            "gauge" => assert!(!name.ends_with("_total"), "{line}"),
            other => panic!("{other}: {line}"),
        }
        seen += 1;
    }
    assert!(seen >= 8, "{text}");
}
