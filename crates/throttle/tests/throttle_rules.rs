//! Throttle rules from YAML, and reloading them.

use std::error::Error;

use axum::http::Request;
use std::time::{Duration, SystemTime};

use tollgate::ManualClock;
use tollgate_throttle::{
    reload_rules, rules_from_yaml, spawn_rules_reload, RequestHead, Throttler,
};

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

/// The rule that rejects a request once every rule's one request in its
/// window is spent.
fn limiting_rule(t: &Throttler) -> String {
    let r = Request::builder().body(()).unwrap();
    let _ = t.check(&RequestHead::of(&r));
    let err = t.check(&RequestHead::of(&r)).unwrap_err();
    err.rule().unwrap().to_owned()
}

/// Sleeps on tokio's paused clock, letting the watcher run, until
/// `limiting_rule` names `rule`; at most ten virtual seconds.
async fn wait_for_rule(t: &Throttler, rule: &str) {
    for _ in 0..1_000 {
        if limiting_rule(t) == rule {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(limiting_rule(t), rule);
}

/// The reload task is the service kit's file watcher: SIGHUP reloads the
/// file whatever its modification time, and a changed modification time
/// reloads it at the next poll. Tokio's paused clock drives the polls
/// (one an hour); only the file's modification time is real, and it is set
/// explicitly.
#[tokio::test(start_paused = true)]
async fn the_rules_reload_on_sighup_and_when_their_file_changes() {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-rules-watch-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("rules.yaml");
    let written = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let write = |name: &str, modified: SystemTime| {
        let rules = format!(
            "rules:\n  - name: {name}\n    key: global\n    limit: {{ fixed_window: {{ limit: 1, window: 1h }} }}\n"
        );
        std::fs::write(&path, rules).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(modified).unwrap();
    };
    write("a", written);
    let t = Throttler::builder().clock(ManualClock::new()).build();
    assert!(reload_rules(&t, &path));
    assert_eq!(limiting_rule(&t), "a");
    let task = spawn_rules_reload(t.clone(), path.clone(), Duration::from_secs(3_600));

    // New rules under the same modification time: only SIGHUP loads them.
    write("b", written);
    // SAFETY: `raise` has no preconditions; the watcher has installed
    // tokio's SIGHUP handler, so the signal does not end the process.
    assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
    wait_for_rule(&t, "b").await;

    // New rules under a new modification time: the next poll loads them.
    write("c", written + Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    wait_for_rule(&t, "c").await;
    task.abort();
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
