//! The HTTP debug port: `GET /` (a status page: the links and the
//! buckets), `POST /api/allow` (Allow as JSON), `GET /api/buckets` (the
//! configured buckets, used or not, and the live dynamic ones), `GET
//! /metrics` (Prometheus) and `GET /healthz`.
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

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::config::{BucketConfig, DEFAULT_BUCKET_NAME, GLOBAL_NAMESPACE};
use super::registry::{resolve, BucketKind};
use super::service::{AllowRequest, Quota};
use tollgate_service::{html_escape as esc, DebugPort};

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

/// The HTTP endpoints as an axum router: the service kit's debug port
/// (the status page, `/metrics`, `/healthz` following
/// [`Quota::readiness`]) and the quota's own pages.
pub fn router(quota: Arc<Quota>) -> Router {
    let (metrics, status) = (Arc::clone(&quota), Arc::clone(&quota));
    DebugPort::new(
        "tollgate quota",
        "tollgate quota: status",
        quota.readiness().clone(),
    )
    .metrics(move || metrics.metrics().render())
    .page("/api/buckets", "the buckets, as JSON")
    .page("/metrics", "Prometheus metrics")
    .page("/healthz", "ok, or 503 while the server is not ready")
    .page(
        "POST /api/allow",
        "Allow as JSON, e.g. \
         <code>{\"namespace\":\"ns\",\"bucket_name\":\"b\",\"tokens_requested\":1}</code>",
    )
    .page(
        "/api/admin/config",
        "the configuration (with <code>--admin</code>)",
    )
    .index_extra(move || bucket_table(&status))
    .router()
    .merge(
        Router::new()
            .route("/api/allow", post(allow))
            .route("/api/buckets", get(buckets))
            .with_state(quota),
    )
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
    let d = quota
        .allow_async(&AllowRequest {
            namespace: &req.namespace,
            bucket: &req.bucket_name,
            tokens: req.tokens_requested,
            max_wait_millis: req
                .max_wait_time_override
                .then_some(req.max_wait_millis_override),
        })
        .await;
    json(
        StatusCode::OK,
        &serde_json::json!({
            "status": d.status.name(),
            "tokens_granted": d.tokens_granted,
            "wait_millis": d.wait_millis(),
        }),
    )
}

/// One row of the bucket list.
struct Row {
    namespace: String,
    bucket: String,
    kind: BucketKind,
    /// Whether the bucket exists yet (a configured bucket is made on its
    /// first request).
    live: bool,
    /// Tokens on hand (negative: debt); a bucket not made yet would start
    /// full.
    available: i64,
    size: u64,
    fill_rate: f64,
}

/// The configured buckets (named, namespace and global defaults), used or
/// not, and the live dynamic ones, sorted by namespace and name; at most
/// [`LIST_LIMIT`] live ones.
fn rows(quota: &Quota) -> Vec<Row> {
    let config = quota.registry().config();
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    let mut configured = |namespace: &str, bucket: &str, kind: BucketKind, b: &BucketConfig| {
        rows.insert(
            (namespace.to_owned(), bucket.to_owned()),
            Row {
                namespace: namespace.to_owned(),
                bucket: bucket.to_owned(),
                kind,
                live: false,
                available: i64::try_from(b.size).unwrap_or(i64::MAX),
                size: b.size,
                fill_rate: b.fill_rate,
            },
        );
    };
    if let Some(b) = &config.global_default_bucket {
        configured(
            GLOBAL_NAMESPACE,
            DEFAULT_BUCKET_NAME,
            BucketKind::GlobalDefault,
            b,
        );
    }
    for (ns, n) in &config.namespaces {
        if let Some(b) = &n.default_bucket {
            configured(ns, DEFAULT_BUCKET_NAME, BucketKind::NamespaceDefault, b);
        }
        for (name, b) in &n.buckets {
            configured(ns, name, BucketKind::Named, b);
        }
    }
    for (namespace, bucket, kind, available) in quota.registry().list(LIST_LIMIT) {
        let (size, fill_rate) = resolve(&config, &namespace, &bucket)
            .map_or((0, 0.0), |(_, _, _, b)| (b.size, b.fill_rate));
        let key = (namespace.clone(), bucket.clone());
        let row = rows.entry(key).or_insert_with(|| Row {
            namespace,
            bucket,
            kind,
            live: true,
            available,
            size,
            fill_rate,
        });
        row.live = true;
        row.available = available;
    }
    rows.into_values().collect()
}

async fn buckets(State(quota): State<Arc<Quota>>) -> Response {
    let list: Vec<_> = rows(&quota)
        .into_iter()
        .map(|r| {
            serde_json::json!({
                "namespace": r.namespace,
                "bucket_name": r.bucket,
                "kind": r.kind.as_str(),
                "live": r.live,
                "tokens_available": r.available,
                "size": r.size,
                "fill_rate": r.fill_rate,
            })
        })
        .collect();
    json(StatusCode::OK, &serde_json::Value::Array(list))
}

/// The status page's end: the bucket counts and the buckets.
fn bucket_table(quota: &Quota) -> String {
    let rows = rows(quota);
    let mut page = String::new();
    let _ = writeln!(
        page,
        "<p>{} buckets live, {} dynamic.</p>",
        quota.registry().len(),
        quota.registry().dynamic_total()
    );
    page.push_str(
        "<table border=1 cellpadding=4>\n<tr><th>namespace</th><th>bucket</th><th>kind</th>\
         <th>live</th><th>tokens available</th><th>size</th><th>fill rate (/s)</th></tr>\n",
    );
    for r in &rows {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.namespace),
            esc(&r.bucket),
            r.kind.as_str(),
            if r.live { "yes" } else { "not yet used" },
            r.available,
            r.size,
            r.fill_rate
        );
    }
    page.push_str("</table>\n");
    page
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    use super::*;
    use crate::config::QuotaConfig;
    use crate::registry::QuotaLimits;

    async fn healthz(quota: &Arc<Quota>) -> (StatusCode, String) {
        let request = Request::get("/healthz").body(Body::empty()).unwrap();
        let response = router(Arc::clone(quota)).oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn health_answers_not_ready_while_an_outage_lasts() {
        let config =
            QuotaConfig::from_yaml("global_default_bucket: {size: 1, fill_rate: 1}\n").unwrap();
        let quota = Arc::new(Quota::new(
            config,
            QuotaLimits::default(),
            Arc::new(tollgate::ManualClock::new()),
        ));
        assert_eq!(healthz(&quota).await, (StatusCode::OK, "ok\n".to_owned()));
        let outage = quota.readiness().not_ready();
        assert_eq!(
            healthz(&quota).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: etcd unreachable\n".to_owned()
            )
        );
        drop(outage);
        assert_eq!(healthz(&quota).await, (StatusCode::OK, "ok\n".to_owned()));
    }
}
