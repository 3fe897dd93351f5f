//! The HTTP debug port: the service kit's [`DebugPort`] (an index at `/`,
//! `GET /metrics` in Prometheus' format, `GET /healthz`: `ok` once a
//! configuration is loaded, 503 before), the reference's `GET
//! /healthcheck` (`OK`, or 500 before a configuration is loaded), `GET
//! /rlconfig` (the loaded domains and rules, as text) and the reference's
//! `POST /json` (ShouldRateLimit as JSON).
//!
//! `/json` takes the request in the proto's JSON form, with the entries'
//! field names, and answers 200 with the response when the overall code is
//! OK, 429 when it is OVER_LIMIT, as the reference does:
//!
//! ```text
//! POST /json {"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}
//! 200 {"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"60s"}]}
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate_service::DebugPort;

use super::request::{Code, Descriptor, Request, Response};
use super::service::RateLimitService;

/// The HTTP endpoints as an axum router: the service kit's debug port
/// (an index at `/`, `/metrics`, `/healthz` following
/// [`RateLimitService::readiness`]) and the service's own pages.
pub fn router(service: Arc<RateLimitService>) -> Router {
    let metrics = Arc::clone(&service);
    DebugPort::new(
        "tollgate rls",
        "tollgate rls: Envoy's rate limit service",
        service.readiness().clone(),
    )
    .metrics(move || {
        let m = metrics.metrics();
        m.keys
            .set(i64::try_from(metrics.keys()).unwrap_or(i64::MAX));
        m.render()
    })
    .page("/metrics", "Prometheus metrics")
    .page("/healthz", "ok, or 503 while no configuration is loaded")
    .page(
        "/healthcheck",
        "the reference's health check: OK, or 500 while no configuration is loaded",
    )
    .page("/rlconfig", "the loaded domains and rules")
    .page(
        "POST /json",
        "ShouldRateLimit as JSON, e.g. <code>{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"remote_address\",\"value\":\"1.2.3.4\"}]}]}</code>",
    )
    .router()
    .merge(
        Router::new()
            .route("/healthcheck", get(health))
            .route("/rlconfig", get(rlconfig))
            .route("/json", post(json_call))
            .with_state(service),
    )
}

async fn health(State(service): State<Arc<RateLimitService>>) -> HttpResponse {
    if service.config().is_some() {
        (StatusCode::OK, "OK\n").into_response()
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "no rate limit configuration loaded\n",
        )
            .into_response()
    }
}

async fn rlconfig(State(service): State<Arc<RateLimitService>>) -> String {
    let Some(config) = service.config() else {
        return "no rate limit configuration loaded\n".to_owned();
    };
    let mut out = String::new();
    for domain in config.domains() {
        for rule in config.rules(domain) {
            let limit = match rule.unit {
                Some(unit) => format!("{} per {}", rule.requests_per_unit, unit.name()),
                None => "unlimited".to_owned(),
            };
            let _ = writeln!(
                out,
                "{}: {limit}, algorithm {}{}{}{}",
                rule.path,
                rule.algorithm.name(),
                if rule.name.is_empty() {
                    String::new()
                } else {
                    format!(", name {}", rule.name)
                },
                if rule.shadow_mode {
                    ", shadow_mode"
                } else {
                    ""
                },
                if rule.quota_mode { ", quota_mode" } else { "" },
            );
        }
    }
    out
}

#[derive(Deserialize)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    hits_addend: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default)]
    hits_addend: u32,
}

async fn json_call(State(service): State<Arc<RateLimitService>>, body: Bytes) -> HttpResponse {
    let req: JsonRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("malformed request: {e}\n")).into_response()
        }
    };
    let request = Request {
        domain: req.domain,
        descriptors: req
            .descriptors
            .into_iter()
            .map(|d| Descriptor {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                limit: None,
                hits_addend: d.hits_addend,
            })
            .collect(),
        hits_addend: req.hits_addend,
    };
    match service.should_rate_limit_async(&request).await {
        Ok(r) => {
            let code = if r.overall_code == Code::OverLimit {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                to_json(&r).to_string(),
            )
                .into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

fn code(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

fn to_json(r: &Response) -> Value {
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut v = json!({"code": code(s.code)});
            if let Some(l) = &s.current_limit {
                let mut limit =
                    json!({"requestsPerUnit": l.requests_per_unit, "unit": l.unit.name()});
                if !l.name.is_empty() {
                    limit["name"] = json!(l.name);
                }
                v["currentLimit"] = limit;
            }
            if s.limit_remaining != 0 {
                v["limitRemaining"] = json!(s.limit_remaining);
            }
            if let Some(d) = s.duration_until_reset {
                v["durationUntilReset"] = json!(format!("{}s", d.as_secs()));
            }
            v
        })
        .collect();
    let mut out = json!({"overallCode": code(r.overall_code), "statuses": statuses});
    if !r.response_headers.is_empty() {
        out["responseHeadersToAdd"] = r
            .response_headers
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
    }
    out
}
