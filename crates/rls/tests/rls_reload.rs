//! Reload without SIGHUP: a YAML file of a configuration directory added,
//! edited in place or removed is picked up by the watcher; an invalid one
//! is logged and refused, the previous configuration answering.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_rls::{spawn_config_reload, RateLimitService, RlsConfig, RlsSettings};

fn limit(domain: &str, n: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n"
    )
}

/// The limit of `domain`'s `user` rule in force.
fn limit_of(service: &RateLimitService, domain: &str) -> Option<u32> {
    let config = service.config()?;
    config.rules(domain).first().map(|r| r.requests_per_unit)
}

/// Waits (at most 20 s, polling) until `done` holds.
async fn until(mut done: impl FnMut() -> bool, what: &str) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[tokio::test]
async fn a_file_added_edited_or_removed_in_the_directory_is_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &limit("a", 1));
    write(dir.path(), "b.yaml", &limit("b", 2));
    let service = Arc::new(RateLimitService::new(
        Some(RlsConfig::load(dir.path(), false).unwrap()),
        RlsSettings::default(),
        Arc::new(ManualClock::new()),
    ));
    spawn_config_reload(
        Arc::clone(&service),
        dir.path().to_owned(),
        false,
        Duration::from_millis(20),
    );

    // Edited in place: the directory's own time does not change.
    let dir_time = std::fs::metadata(dir.path()).unwrap().modified().unwrap();
    write(dir.path(), "b.yaml", &limit("b", 20));
    assert_eq!(
        std::fs::metadata(dir.path()).unwrap().modified().unwrap(),
        dir_time
    );
    until(|| service.generation() == 1, "the edit is loaded").await;
    assert_eq!(limit_of(&service, "b"), Some(20));

    // Added.
    write(dir.path(), "c.yaml", &limit("c", 3));
    until(|| service.generation() == 2, "the new file is loaded").await;
    assert_eq!(service.config().unwrap().domains(), ["a", "b", "c"]);

    // Removed.
    std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
    until(|| service.generation() == 3, "the removal is loaded").await;
    assert_eq!(service.config().unwrap().domains(), ["a", "b"]);

    // Invalid: refused, the old configuration answering.
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: minutes}\n",
    );
    until(
        || service.metrics().config_load_errors() == 1,
        "the invalid file is refused",
    )
    .await;
    assert_eq!(service.generation(), 3);
    assert_eq!(limit_of(&service, "a"), Some(1));
    assert_eq!(limit_of(&service, "b"), Some(20));

    // Fixed again: loaded.
    write(dir.path(), "a.yaml", &limit("a", 10));
    until(|| service.generation() == 4, "the fixed file is loaded").await;
    assert_eq!(limit_of(&service, "a"), Some(10));
}
