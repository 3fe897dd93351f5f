//! envoyproxy/ratelimit's README examples (`examples/config/`, one file
//! each) load together and answer as that README describes.

use std::path::Path;
use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_rls::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitService, Request, RlsConfig,
    RlsSettings, Unit,
};

const T: u64 = 1_700_000_040;

fn service() -> RateLimitService {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
    let config = RlsConfig::load(&dir, false).unwrap();
    let clock = ManualClock::new();
    clock.set_ns(T * 1_000_000_000);
    RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(clock))
}

/// The statuses of one call.
fn call(
    s: &RateLimitService,
    domain: &str,
    descriptors: &[&[(&str, &str)]],
) -> Vec<DescriptorStatus> {
    s.should_rate_limit(&Request {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|e| Descriptor::new(e.iter().copied()))
            .collect(),
        hits_addend: 0,
    })
    .unwrap()
    .statuses
}

/// The one status's (code, limit, remaining).
fn one(
    s: &RateLimitService,
    domain: &str,
    entries: &[(&str, &str)],
) -> (Code, Option<(u32, Unit)>, u32) {
    let st = call(s, domain, &[entries]).remove(0);
    (
        st.code,
        st.current_limit.map(|l| (l.requests_per_unit, l.unit)),
        st.limit_remaining,
    )
}

#[test]
fn every_example_loads() {
    let s = service();
    assert_eq!(
        s.config().unwrap().domains(),
        [
            "edge_proxy_per_ip",
            "example10",
            "example10_wildcard",
            "example11",
            "example11_metrics",
            "example4",
            "example6",
            "example7",
            "example8",
            "example9",
            "internal",
            "messaging",
            "mongo_cps",
        ]
    );
}

#[test]
fn example_1_two_values_two_limits() {
    let s = service();
    let sec500 = Some((500, Unit::Second));
    assert_eq!(
        one(&s, "mongo_cps", &[("database", "users")]),
        (Code::Ok, sec500, 499)
    );
    assert_eq!(
        one(&s, "mongo_cps", &[("database", "default")]),
        (Code::Ok, sec500, 499)
    );
    assert_eq!(one(&s, "mongo_cps", &[("database", "other")]).1, None);
}

#[test]
fn example_2_nested_and_aggregate_descriptors() {
    let s = service();
    let both: [&[(&str, &str)]; 2] = [
        &[("message_type", "marketing"), ("to_number", "2061111111")],
        &[("to_number", "2061111111")],
    ];
    for sent in 1..=5 {
        let st = call(&s, "messaging", &both);
        assert_eq!(st[0].limit_remaining, 5 - sent);
        assert_eq!(st[1].limit_remaining, 100 - sent);
    }
    // The sixth marketing message is over; the request as a whole too.
    let r = s
        .should_rate_limit(&Request {
            domain: "messaging".into(),
            descriptors: both
                .iter()
                .map(|e| Descriptor::new(e.iter().copied()))
                .collect(),
            hits_addend: 0,
        })
        .unwrap();
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        (r.statuses[0].code, r.statuses[1].limit_remaining),
        (Code::OverLimit, 94)
    );
    // Another number has its own 5.
    assert_eq!(
        one(
            &s,
            "messaging",
            &[("message_type", "marketing"), ("to_number", "2062222222")]
        ),
        (Code::Ok, Some((5, Unit::Day)), 4)
    );
}

#[test]
fn example_3_the_most_specific_match_wins() {
    let s = service();
    assert_eq!(
        one(&s, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]),
        (Code::Ok, Some((10, Unit::Second)), 9)
    );
    assert_eq!(
        one(&s, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]),
        (Code::OverLimit, Some((0, Unit::Second)), 0)
    );
}

#[test]
fn example_4_a_request_matches_only_at_its_own_depth() {
    let s = service();
    assert_eq!(
        one(&s, "example4", &[("key", "value"), ("subkey", "subvalue")]),
        (Code::Ok, Some((300, Unit::Second)), 299)
    );
    // The README's other configuration: the limit one level up does not
    // match a request of two entries.
    let flat = RlsConfig::from_yaml(
        "example4.yaml",
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit: {requests_per_unit: 300, unit: second}\n",
    )
    .unwrap();
    s.set_config(flat);
    assert_eq!(
        one(&s, "example4", &[("key", "value"), ("subkey", "subvalue")]),
        (Code::Ok, None, 0)
    );
}

#[test]
fn example_5_unlimited_answers_max_remaining() {
    let s = service();
    assert_eq!(
        one(&s, "internal", &[("ldap", "x")]),
        (Code::Ok, None, u32::MAX)
    );
    assert_eq!(
        one(&s, "internal", &[("azure", "x")]),
        (Code::Ok, Some((100, Unit::Minute)), 99)
    );
}

#[test]
fn example_6_shadow_mode_never_limits() {
    let s = service();
    for _ in 0..15 {
        let (code, _, _) = one(
            &s,
            "example6",
            &[("service", "auth-service"), ("user", "user-a")],
        );
        assert_eq!(code, Code::Ok);
    }
    for sent in 1..=20 {
        assert_eq!(
            one(
                &s,
                "example6",
                &[("service", "auth-service"), ("user", "user-b")]
            ),
            (Code::Ok, Some((20, Unit::Second)), 20 - sent)
        );
    }
    assert_eq!(
        one(
            &s,
            "example6",
            &[("service", "auth-service"), ("user", "user-b")]
        )
        .0,
        Code::OverLimit
    );
}

#[test]
fn example_7_replaces() {
    let s = service();
    let k1: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let k2: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    let specific = CurrentLimit {
        name: "specific_limit".into(),
        requests_per_unit: 5,
        unit: Unit::Second,
    };
    assert_eq!(call(&s, "example7", &[k1])[0].current_limit, Some(specific));
    assert_eq!(
        one(&s, "example7", k2),
        (Code::Ok, Some((10, Unit::Second)), 9)
    );
    // Together: the 10 a second replaces the specific limit, which is not
    // charged.
    let st = call(&s, "example7", &[k1, k2]);
    assert_eq!(
        (st[0].current_limit.clone(), st[1].limit_remaining),
        (None, 8)
    );
    assert_eq!(one(&s, "example7", k1).2, 3);
}

#[test]
fn example_8_detailed_metric_changes_no_answer() {
    let s = service();
    assert_eq!(
        one(&s, "example8", &[("key1", "anything")]),
        (Code::Ok, Some((10, Unit::Minute)), 9)
    );
    assert_eq!(
        one(&s, "example8", &[("key1", "value1")]),
        (Code::Ok, Some((20, Unit::Minute)), 19)
    );
}

#[test]
fn example_9_wildcards() {
    let s = service();
    let m20 = Some((20, Unit::Minute));
    assert_eq!(one(&s, "example9", &[("key1", "valueXYZ")]).1, m20);
    assert_eq!(one(&s, "example9", &[("path", "/api/123/action")]).1, m20);
    assert_eq!(one(&s, "example9", &[("path", "/api/123/other")]).1, None);
    assert_eq!(
        one(&s, "example9", &[("route", "/api/v1/resource/123/action")]).1,
        m20
    );
    assert_eq!(
        one(&s, "example9", &[("route", "/api/v1/other/123/action")]).1,
        None
    );
}

#[test]
fn example_10_value_to_metric_changes_no_answer() {
    let s = service();
    let e = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    assert_eq!(
        one(&s, "example10", &e),
        (Code::Ok, Some((60, Unit::Minute)), 59)
    );
    let e = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    assert_eq!(
        one(&s, "example10_wildcard", &e),
        (Code::Ok, Some((100, Unit::Minute)), 99)
    );
}

#[test]
fn example_11_share_threshold() {
    let s = service();
    for _ in 0..5 {
        one(&s, "example11", &[("files", "files/a.pdf")]);
        one(&s, "example11", &[("files", "files/b.csv")]);
    }
    assert_eq!(
        one(&s, "example11", &[("files", "files/c.txt")]).0,
        Code::OverLimit
    );
    for _ in 0..10 {
        one(
            &s,
            "example11",
            &[("files_no_share", "files_no_share/a.pdf")],
        );
    }
    assert_eq!(
        one(
            &s,
            "example11",
            &[("files_no_share", "files_no_share/a.pdf")]
        )
        .0,
        Code::OverLimit
    );
    assert_eq!(
        one(
            &s,
            "example11",
            &[("files_no_share", "files_no_share/b.csv")]
        ),
        (Code::Ok, Some((10, Unit::Hour)), 9)
    );
    // Below a shared wildcard, one counter for every route it matches.
    one(
        &s,
        "example11_metrics",
        &[("route", "api/v1"), ("method", "GET")],
    );
    assert_eq!(
        one(
            &s,
            "example11_metrics",
            &[("route", "api/v2"), ("method", "GET")]
        )
        .2,
        58
    );
}
