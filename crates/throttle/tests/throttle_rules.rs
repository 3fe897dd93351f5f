//! Throttle rules from YAML, and reloading them.

use std::error::Error;

use axum::http::Request;
use tollgate::ManualClock;
use tollgate_throttle::{reload_rules, rules_from_yaml, RequestHead, Throttler};

const RULES: &str = r#"
rules:
  - name: per-api-key
    key: { header: x-api-key }
    limit: { token_pool: { rate: "5,2", backlog: 1s } }
    soft: { sliding_window_counter: { limit: 3, window: 1s } }
  - name: per-ip
    key: peer_ip
    limit: { sliding_log: { limit: 20, window: 10s, log_rejected: true } }
    ban: 1m
    shadow: true
    max_keys: 1000
  - name: upload
    key: { grpc_metadata: x-upload }
    limit: { gcra: { rate: "10", burst: 2, queue: 20 } }
  - name: hourly
    key: user_id
    limit: { fixed_window: { limit: 1000, window: 1h } }
  - name: everyone
    key: global
    limit: { fixed_window: { limit: 2, window: 1m } }
"#;

fn check(t: &Throttler) -> bool {
    let r = Request::builder().body(()).unwrap();
    t.check(&RequestHead::of(&r)).is_ok()
}

#[test]
fn every_policy_and_key_parses() {
    let rules = rules_from_yaml(RULES).unwrap();
    let names: Vec<_> = rules.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        ["per-api-key", "per-ip", "upload", "hourly", "everyone"]
    );
    let t = Throttler::builder().clock(ManualClock::new()).build();
    t.reload(rules);
    // Only "everyone" applies to a bare request: 2 per minute.
    assert!(check(&t));
    assert!(check(&t));
    assert!(!check(&t));
}

#[test]
fn errors_name_the_rule_and_say_why() {
    let bad_rate =
        "rules:\n  - name: r\n    key: global\n    limit: { token_pool: { rate: \"5x\" } }\n";
    let err = rules_from_yaml(bad_rate).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid throttle rules: rule \"r\": rate \"5x\" at byte 0 is not a number"
        ),
        "{err}"
    );
    // The message says it all; no cause is chained to say it twice.
    assert!(err.source().is_none());
    let bad_window = "rules:\n  - name: w\n    key: global\n    limit: { fixed_window: { limit: 1, window: soon } }\n";
    assert_eq!(
        rules_from_yaml(bad_window).unwrap_err().to_string(),
        "invalid throttle rules: rule \"w\": window \"soon\": expected number at 0"
    );
    let zero = "rules:\n  - name: z\n    key: global\n    limit: { fixed_window: { limit: 0, window: 1s } }\n";
    assert_eq!(
        rules_from_yaml(zero).unwrap_err().to_string(),
        "invalid throttle rules: rule \"z\": invalid limit: a limit of zero admits nothing"
    );
    let both = "rules:\n  - name: b\n    key: global\n    limit: { token_pool: { rate: \"5,2\", burst: 3 } }\n";
    assert_eq!(
        rules_from_yaml(both).unwrap_err().to_string(),
        "invalid throttle rules: rule \"b\": invalid limit: a token pool takes a burst ratio (\"5,2\") or a burst, not both"
    );
    let proxy = "rules:\n  - name: p\n    key: { client_ip: { trusted_proxies: [proxy.local] } }\n    limit: { fixed_window: { limit: 1, window: 1s } }\n";
    assert_eq!(
        rules_from_yaml(proxy).unwrap_err().to_string(),
        "invalid throttle rules: rule \"p\": invalid trusted network \"proxy.local\": not an IP address"
    );
    let missing = "rules:\n  - name: m\n    key: global\n    missing_key: allow\n    limit: { fixed_window: { limit: 1, window: 1s } }\n";
    assert!(rules_from_yaml(missing).is_err());
    let unknown = "rules:\n  - name: u\n    key: global\n    limits: {}\n";
    assert!(rules_from_yaml(unknown).is_err());
}

#[test]
fn reload_keeps_unchanged_rules_and_resets_changed_ones() {
    let dir = std::env::temp_dir().join(format!("tollgate-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.yaml");
    let rule = |name: &str, limit: u64| {
        format!("  - name: {name}\n    key: global\n    limit: {{ fixed_window: {{ limit: {limit}, window: 1m }} }}\n")
    };
    std::fs::write(&path, format!("rules:\n{}{}", rule("a", 1), rule("b", 5))).unwrap();
    let t = Throttler::builder().clock(ManualClock::new()).build();
    assert!(reload_rules(&t, &path));
    assert!(check(&t));
    let err = {
        let r = Request::builder().body(()).unwrap();
        t.check(&RequestHead::of(&r)).unwrap_err()
    };
    assert_eq!(err.rule(), Some("a"));

    // A bad file keeps the rules in force.
    std::fs::write(&path, "rules: [").unwrap();
    assert!(!reload_rules(&t, &path));
    assert!(!check(&t));

    // "a" unchanged keeps its exhausted window; "b" changed starts afresh.
    std::fs::write(&path, format!("rules:\n{}{}", rule("a", 1), rule("b", 1))).unwrap();
    assert!(reload_rules(&t, &path));
    assert!(!check(&t));
    std::fs::write(&path, format!("rules:\n{}{}", rule("a", 2), rule("b", 1))).unwrap();
    assert!(reload_rules(&t, &path));
    assert!(check(&t));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_burst_a_missing_key_setting_and_headers_parse() {
    let rules = rules_from_yaml(
        r#"
rules:
  - name: per-key
    key: { header: x-api-key }
    limit: { token_pool: { rate: "5", burst: 3 } }
    missing_key: reject
    headers: true
  - name: per-client
    key: { client_ip: { trusted_proxies: ["10.0.0.0/8"] } }
    limit: { fixed_window: { limit: 100, window: 1m } }
    missing_key: skip
"#,
    )
    .unwrap();
    let t = Throttler::builder().clock(ManualClock::new()).build();
    t.reload(rules);
    // No key: rejected by "per-key".
    let err = t
        .check(&RequestHead::of(&Request::builder().body(()).unwrap()))
        .unwrap_err();
    assert_eq!(err.rule(), Some("per-key"));
    assert_eq!(err.http_status(), 400);
    // A bucket of 3: three at once, with the rule's standing.
    let r = Request::builder()
        .header("x-api-key", "k")
        .body(())
        .unwrap();
    for remaining in [2, 1, 0] {
        let p = t.check(&RequestHead::of(&r)).unwrap();
        assert_eq!(p.limits().len(), 1);
        assert_eq!(p.limits()[0].quota, 3);
        assert_eq!(p.limits()[0].remaining, remaining);
    }
    let err = t.check(&RequestHead::of(&r)).unwrap_err();
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_millis(200))
    );
    assert_eq!(err.limits()[0].remaining, 0);
}
