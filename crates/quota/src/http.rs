//! The HTTP debug port: `POST /api/allow` (Allow as JSON), `GET
//! /api/buckets` (the live buckets), `GET /metrics` (Prometheus) and `GET
//! /healthz`.
//!
//! The JSON Allow request uses the proto's field names; the response names
//! the status as the proto's enum does:
//!
//! ```text
//! POST /api/allow {"namespace":"db","bucket_name":"users","tokens_requested":2}
//! 200 {"status":"OK","tokens_granted":2,"wait_millis":0}
//! ```

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::service::{AllowRequest, Quota};

/// The most buckets `/api/buckets` lists.
const LIST_LIMIT: usize = 10_000;

/// Serves the HTTP endpoints for `quota` on `listener` until `shutdown`.
///
/// # Errors
///
/// An I/O error from the listener.
pub async fn serve(
    quota: Arc<Quota>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(quota))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The HTTP endpoints as an axum router.
pub fn router(quota: Arc<Quota>) -> Router {
    Router::new()
        .route("/api/allow", post(allow))
        .route("/api/buckets", get(buckets))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(quota)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonAllow {
    namespace: String,
    bucket_name: String,
    #[serde(default)]
    tokens_requested: i64,
    #[serde(default)]
    max_wait_millis_override: i64,
    #[serde(default)]
    max_wait_time_override: bool,
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn allow(State(quota): State<Arc<Quota>>, body: Bytes) -> Response {
    let req: JsonAllow = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"status": "REJECTED_INVALID_REQUEST", "error": e.to_string()}),
            )
        }
    };
    let d = quota.allow(&AllowRequest {
        namespace: &req.namespace,
        bucket: &req.bucket_name,
        tokens: req.tokens_requested,
        max_wait_millis: req
            .max_wait_time_override
            .then_some(req.max_wait_millis_override),
    });
    json(
        StatusCode::OK,
        &serde_json::json!({
            "status": d.status.name(),
            "tokens_granted": d.tokens_granted,
            "wait_millis": d.wait_millis(),
        }),
    )
}

async fn buckets(State(quota): State<Arc<Quota>>) -> Response {
    let list: Vec<_> = quota
        .registry()
        .list(LIST_LIMIT)
        .into_iter()
        .map(|(namespace, bucket, kind, available)| {
            serde_json::json!({
                "namespace": namespace,
                "bucket_name": bucket,
                "kind": kind.as_str(),
                "tokens_available": available,
            })
        })
        .collect();
    json(StatusCode::OK, &serde_json::Value::Array(list))
}

async fn metrics(State(quota): State<Arc<Quota>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        quota.metrics().render(),
    )
        .into_response()
}
