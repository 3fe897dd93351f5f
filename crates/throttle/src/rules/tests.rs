//! The unit tests of `rules.rs`.

use super::*;

fn window(limit: u64) -> Limit {
    Limit::FixedWindow(FixedWindow::new(limit, Duration::from_secs(60)).expect("a window"))
}

fn pool(rate: &str) -> Limit {
    Limit::TokenPool(TokenPool::new(rate.parse().expect("a rate")))
}

fn gcra(rate: &str, queue: u64) -> Limit {
    Limit::Gcra(Gcra::new(rate.parse().expect("a rate"), 2, queue).expect("a gcra"))
}

#[test]
fn a_rule_is_known_on_reload_by_every_setting() {
    let rule = |limit| Rule::new("r", Extract::header("x-api-key"), window(limit));
    assert_eq!(rule(5).key(), rule(5).key());
    assert_ne!(rule(5).key(), rule(6).key());
    assert_ne!(
        rule(5).key(),
        Rule::new("other", Extract::header("x-api-key"), window(5)).key()
    );
    assert_ne!(
        rule(5).key(),
        Rule::new("r", Extract::header("x-user"), window(5)).key()
    );
    assert_ne!(rule(5).key(), rule(5).soft(window(4)).key());
    assert_ne!(rule(5).key(), rule(5).ban(Duration::from_secs(1)).key());
    assert_ne!(rule(5).key(), rule(5).mode(Mode::Shadow).key());
    assert_ne!(rule(5).key(), rule(5).max_keys(10).key());
    assert_ne!(rule(5).key(), rule(5).missing_key(MissingKey::Skip).key());
    assert_ne!(rule(5).key(), rule(5).ratelimit_headers(true).key());
}

#[test]
fn limits_are_told_apart_by_their_policy_and_parameters() {
    let key = |limit: Limit| Rule::new("r", Extract::global(), limit).key();
    assert_eq!(key(pool("5,2")), key(pool("5,2")));
    assert_ne!(key(pool("5,2")), key(pool("6,2")));
    assert_ne!(key(pool("5,2")), key(pool("5,3")));
    let bucket = |burst| TokenPool::new("5".parse().expect("a rate")).with_burst(burst);
    assert_ne!(
        key(Limit::TokenPool(bucket(3).expect("a bucket"))),
        key(Limit::TokenPool(bucket(4).expect("a bucket")))
    );
    assert_ne!(
        key(pool("5")),
        key(Limit::TokenPool(
            TokenPool::new("5".parse().expect("a rate")).with_backlog_cap(Duration::from_secs(2))
        ))
    );
    assert_eq!(key(gcra("5", 1)), key(gcra("5", 1)));
    assert_ne!(key(gcra("5", 1)), key(gcra("5", 2)));
    assert_ne!(key(gcra("5", 1)), key(gcra("7", 1)));
    let log = |yes| {
        Limit::SlidingLog(
            SlidingLog::new(5, Duration::from_secs(60))
                .expect("a log")
                .log_rejected(yes),
        )
    };
    assert_ne!(key(log(false)), key(log(true)));
    let counter = Limit::SlidingWindowCounter(
        SlidingWindowCounter::new(5, Duration::from_secs(60)).expect("a counter"),
    );
    assert_ne!(key(window(5)), key(counter));
}

#[test]
fn custom_extractors_are_known_by_their_name() {
    let rule = |name: &'static str| {
        Rule::new(
            "r",
            Extract::custom(name, |_: &RequestHead<'_>| None),
            window(5),
        )
    };
    assert_eq!(rule("mine").key(), rule("mine").key());
    assert_ne!(rule("mine").key(), rule("yours").key());
}
