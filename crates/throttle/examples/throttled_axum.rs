//! An axum service throttled per API key and per client IP, with its
//! throttle metrics on `/metrics`.
//!
//! ```text
//! cargo run -p tollgate-throttle --example throttled_axum    # listens on 127.0.0.1:3000
//! curl -i -H 'x-api-key: demo' http://127.0.0.1:3000/
//! curl -i -H 'x-criticality: CRITICAL' http://127.0.0.1:3000/
//! curl http://127.0.0.1:3000/metrics
//! ```
//!
//! With a second argument, the rules are read from that YAML file instead
//! (the format is in `tollgate_throttle`'s `rules_from_yaml`) and
//! reloaded whenever it changes:
//!
//! ```text
//! cargo run -p tollgate-throttle --example throttled_axum -- 127.0.0.1:3000 rules.yaml
//! ```
//!
//! Rules: each API key may make 5 requests per second with bursts of 10 (a
//! token bucket: 10 at once, 15 in a fresh key's first second), with a
//! soft limit of 3 per second (a sliding window counter) above which
//! responses carry `ratelimit-*` warnings; requests without a key share
//! one such bucket. Each client IP may make 20 requests in any 10 seconds
//! (a sliding log), and an IP over it is banned for a minute beyond. Every
//! response says each rule's quota and the client's standing in
//! `ratelimit-policy` and `ratelimit`. All requests then pass an admission
//! queue of 50 releasing 100 per second, where a CRITICAL request may
//! evict queued NOT_CRITICAL ones; only callers on this machine may say
//! they are CRITICAL (`x-criticality`).
//!
//! The per-IP rule needs the peer's address: the router is served with
//! `into_make_service_with_connect_info::<SocketAddr>()` (with a plain
//! `axum::serve(listener, app)`, the rule logs an error and counts every
//! request in one shared bucket). Behind a reverse proxy, use
//! `Extract::client_ip(Trust::networks(["<proxy CIDR>"])?)` instead.

use std::net::SocketAddr;
use std::time::Duration;

use axum::{routing::get, Router};
use prometheus::Encoder as _;
use tollgate::RateSpec;
use tollgate_throttle::{
    rules_from_file, spawn_rules_reload, Extract, Limit, Rule, SlidingLog, SlidingWindowCounter,
    ThrottleLayer, Throttler, TokenPool, Trust,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()?;

    let throttler = Throttler::builder()
        .rule(
            Rule::new(
                "per-api-key",
                Extract::header("x-api-key"),
                Limit::TokenPool(TokenPool::new("5".parse::<RateSpec>()?).with_burst(10)?),
            )
            .soft(Limit::SlidingWindowCounter(SlidingWindowCounter::new(
                3,
                Duration::from_secs(1),
            )?)),
        )
        .rule(
            Rule::new(
                "per-client-ip",
                Extract::peer_ip(),
                Limit::SlidingLog(SlidingLog::new(20, Duration::from_secs(10))?),
            )
            .ban(Duration::from_secs(60)),
        )
        .ratelimit_headers(true)
        .criticality_header("x-criticality", Trust::networks(["127.0.0.0/8", "::1"])?)
        .queue(50, RateSpec::new(100.0)?)
        .build();

    if let Some(path) = std::env::args().nth(2) {
        let path = std::path::PathBuf::from(path);
        throttler.reload(rules_from_file(&path)?);
        spawn_rules_reload(throttler.clone(), path, Duration::from_secs(1));
    }

    let registry = throttler.registry().clone();
    let metrics = move || {
        let registry = registry.clone();
        async move {
            let mut out = Vec::new();
            let _ = prometheus::TextEncoder::new().encode(&registry.gather(), &mut out);
            String::from_utf8(out).unwrap_or_default()
        }
    };

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(ThrottleLayer::new(throttler))
        // Outside the layer: scraping is never throttled.
        .route("/metrics", get(metrics));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
