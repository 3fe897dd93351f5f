//! The debug port: `/json` answers as ShouldRateLimit does (429 when over
//! the limit), `/metrics` counts per rule under the reference's names,
//! the service kit's `/` and `/healthz`, the reference's `/healthcheck`,
//! and `/rlconfig`.

use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tollgate::ManualClock;
use tollgate_rls::{http_router, RateLimitService, RlsConfig, RlsSettings};

const T: u64 = 1_700_000_040;

async fn serve(config: Option<&str>) -> String {
    let clock = ManualClock::new();
    clock.set_ns(T * 1_000_000_000);
    let config = config.map(|c| RlsConfig::from_yaml("c.yaml", c).unwrap());
    let service = Arc::new(RateLimitService::new(
        config,
        RlsSettings::default(),
        Arc::new(clock),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, http_router(service)).await });
    addr
}

/// One HTTP/1.1 exchange: (status, body).
async fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

const EDGE: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1, name: per_ip}\n  - key: soft\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";

#[tokio::test]
async fn json_answers_200_then_429() {
    let addr = serve(Some(EDGE)).await;
    let call = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}"#;
    assert_eq!(
        http(&addr, "POST", "/json", call).await,
        (
            200,
            r#"{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_ip","requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"60s"}]}"#.to_owned()
        )
    );
    let (status, body) = http(&addr, "POST", "/json", call).await;
    assert_eq!(status, 429);
    assert!(body.starts_with(r#"{"overallCode":"OVER_LIMIT""#), "{body}");
    let (status, body) = http(&addr, "POST", "/json", r#"{"domain":""}"#).await;
    assert_eq!(
        (status, body.as_str()),
        (400, "rate limit domain must not be empty\n")
    );
}

#[tokio::test]
async fn metrics_count_hits_per_rule() {
    let addr = serve(Some(EDGE)).await;
    let ip = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}"#;
    let soft = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"soft","value":"x"}]}]}"#;
    for body in [ip, ip, ip, soft, soft] {
        http(&addr, "POST", "/json", body).await;
    }
    let (status, metrics) = http(&addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    for line in [
        "tollgate_rls_total_hits_total{key=\"edge.remote_address\"} 3",
        "tollgate_rls_over_limit_total{key=\"edge.remote_address\"} 2",
        "tollgate_rls_within_limit_total{key=\"edge.remote_address\"} 1",
        "tollgate_rls_near_limit_total{key=\"edge.remote_address\"} 1",
        "tollgate_rls_shadow_mode_total{key=\"edge.soft\"} 1",
        "tollgate_rls_calls_total 5",
        "tollgate_rls_keys 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in:\n{metrics}"
        );
    }
}

#[tokio::test]
async fn health_and_rules_pages() {
    let addr = serve(Some(EDGE)).await;
    // The service kit's health check, and the reference's.
    assert_eq!(
        http(&addr, "GET", "/healthz", "").await,
        (200, "ok\n".to_owned())
    );
    assert_eq!(
        http(&addr, "GET", "/healthcheck", "").await,
        (200, "OK\n".to_owned())
    );
    // The kit's index lists the service's own pages.
    let (status, index) = http(&addr, "GET", "/", "").await;
    assert_eq!(status, 200);
    for page in ["/rlconfig", "/healthcheck", "POST /json", "/metrics"] {
        assert!(index.contains(page), "no {page} in:\n{index}");
    }
    assert_eq!(
        http(&addr, "GET", "/rlconfig", "").await.1,
        "edge.remote_address: 1 per MINUTE, algorithm fixed_window, name per_ip\nedge.soft: 1 per MINUTE, algorithm fixed_window, shadow_mode\n"
    );
    let none = serve(None).await;
    assert_eq!(http(&none, "GET", "/healthz", "").await.0, 503);
    assert_eq!(http(&none, "GET", "/healthcheck", "").await.0, 500);
}

#[tokio::test]
async fn healthz_turns_ready_when_a_configuration_is_set() {
    let service = Arc::new(RateLimitService::new(
        None,
        RlsSettings::default(),
        Arc::new(ManualClock::new()),
    ));
    assert!(!service.readiness().is_ready());
    service.set_config(RlsConfig::from_yaml("c.yaml", EDGE).unwrap());
    assert!(service.readiness().is_ready());
}

#[tokio::test]
async fn metrics_split_a_call_across_the_thresholds_as_the_reference_does() {
    // Limit 10, near-limit threshold floor(10 × 0.8) = 8.
    let addr = serve(Some(
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
    ))
    .await;
    // Counts 0→5 (within), 5→9 (one hit past 8: near), 9→12 (two past the
    // limit: over; one between 9 and 10: near), 12→14 (all over).
    for hits in [5, 4, 3, 2] {
        let call = format!(
            r#"{{"domain":"edge","hitsAddend":{hits},"descriptors":[{{"entries":[{{"key":"k","value":"v"}}]}}]}}"#
        );
        http(&addr, "POST", "/json", &call).await;
    }
    let (_, metrics) = http(&addr, "GET", "/metrics", "").await;
    for line in [
        "tollgate_rls_total_hits_total{key=\"edge.k\"} 14",
        "tollgate_rls_within_limit_total{key=\"edge.k\"} 9",
        "tollgate_rls_near_limit_total{key=\"edge.k\"} 2",
        "tollgate_rls_over_limit_total{key=\"edge.k\"} 4",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in:\n{metrics}"
        );
    }
}
