//! The debug port every server serves: `/` (an index of its pages),
//! `/metrics` (Prometheus) and `/healthz` (its [`Readiness`]), built once
//! and merged with the product's own pages.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::html::html_escape as esc;
use super::readiness::Readiness;

/// What `/healthz` answers while a service the server needs is
/// unreachable (an [`Outage`](crate::Outage) lasts).
const NOT_READY: &str = "not ready: etcd unreachable\n";

/// The HTML that closes the index page.
type Extra = Arc<dyn Fn() -> String + Send + Sync>;

/// A server's debug port: an index page at `/` listing its pages,
/// `/metrics` with the text its metrics render to, and `/healthz`
/// answering `ok` while the server is ready and 503 while it is not.
/// [`DebugPort::router`] gives the routes, to merge with the server's
/// own.
///
/// # Examples
///
/// ```
/// use tollgate_service::{DebugPort, Readiness};
///
/// let readiness = Readiness::default();
/// let router = DebugPort::new("tollgate", "tollgate: my server", readiness.clone())
///     .metrics(|| "requests_total 3\n".to_owned())
///     .page("/metrics", "Prometheus metrics")
///     .page("/healthz", "ok, or 503 while etcd is unreachable")
///     .router()
///     .merge(axum::Router::new().route("/debug/mine", axum::routing::get(|| async { "mine" })));
/// # drop(router);
/// ```
#[derive(Clone)]
#[must_use = "a debug port serves nothing until its router is served"]
pub struct DebugPort {
    title: String,
    heading: String,
    /// (path, what it shows as HTML), in the index's order.
    pages: Vec<(String, String)>,
    metrics: Arc<dyn Fn() -> String + Send + Sync>,
    readiness: Readiness,
    extra: Option<Extra>,
}

impl std::fmt::Debug for DebugPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugPort")
            .field("title", &self.title)
            .field("heading", &self.heading)
            .field("pages", &self.pages)
            .field("readiness", &self.readiness)
            .finish_non_exhaustive()
    }
}

impl DebugPort {
    /// A debug port whose index is titled `title` under the heading
    /// `heading`, healthy while `readiness` is ready, with no metrics and
    /// no pages listed yet.
    pub fn new(title: impl Into<String>, heading: impl Into<String>, readiness: Readiness) -> Self {
        DebugPort {
            title: title.into(),
            heading: heading.into(),
            pages: Vec::new(),
            metrics: Arc::new(String::new),
            readiness,
            extra: None,
        }
    }

    /// `/metrics` answers with what `render` returns, in the Prometheus
    /// text format.
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.metrics = Arc::new(render);
        self
    }

    /// Lists `path` on the index with `what` (HTML) beside it: as a link
    /// when it is a path to get (`/...` with no query), else in `<code>`
    /// (`/page?id=ID`, `POST /api`).
    pub fn page(mut self, path: impl Into<String>, what: impl Into<String>) -> Self {
        self.pages.push((path.into(), what.into()));
        self
    }

    /// Ends the index page with the HTML `render` returns at each request
    /// (a server's state at a glance).
    pub fn index_extra(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.extra = Some(Arc::new(render));
        self
    }

    /// The index page.
    fn index(&self) -> String {
        let mut page = format!(
            "<!DOCTYPE html>\n<html><head><title>{}</title></head><body>\n<h1>{}</h1>\n<ul>\n",
            esc(&self.title),
            esc(&self.heading)
        );
        for (path, what) in &self.pages {
            if path.starts_with('/') && !path.contains('?') {
                let _ = writeln!(page, "<li><a href=\"{0}\">{0}</a>: {what}</li>", esc(path));
            } else {
                let _ = writeln!(page, "<li><code>{}</code>: {what}</li>", esc(path));
            }
        }
        page.push_str("</ul>\n");
        if let Some(extra) = &self.extra {
            page.push_str(&extra());
        }
        page.push_str("</body></html>\n");
        page
    }

    /// The routes: `/`, `/metrics` and `/healthz`.
    pub fn router(self) -> Router {
        let port = Arc::new(self);
        let (index, metrics, health) = (Arc::clone(&port), Arc::clone(&port), port);
        Router::new()
            .route("/", get(move || async move { Html(index.index()) }))
            .route(
                "/metrics",
                get(move || async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        (metrics.metrics)(),
                    )
                }),
            )
            .route(
                "/healthz",
                get(move || async move { healthz(&health.readiness) }),
            )
    }
}

/// `ok`, or 503 while an outage lasts.
fn healthz(readiness: &Readiness) -> Response {
    if readiness.is_ready() {
        "ok\n".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, NOT_READY).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    use super::*;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_index_links_pages_to_get_and_names_the_others() {
        let router = DebugPort::new("t<1>", "t: server", Readiness::default())
            .page("/metrics", "Prometheus <b>metrics</b>")
            .page("/debug/one?id=ID", "one")
            .page("POST /api", "JSON")
            .index_extra(|| "<p>3 live</p>\n".to_owned())
            .router();
        assert_eq!(
            get(&router, "/").await,
            (
                StatusCode::OK,
                "<!DOCTYPE html>\n<html><head><title>t&lt;1&gt;</title></head><body>\n\
                 <h1>t: server</h1>\n<ul>\n\
                 <li><a href=\"/metrics\">/metrics</a>: Prometheus <b>metrics</b></li>\n\
                 <li><code>/debug/one?id=ID</code>: one</li>\n\
                 <li><code>POST /api</code>: JSON</li>\n</ul>\n\
                 <p>3 live</p>\n</body></html>\n"
                    .to_owned()
            )
        );
    }

    #[tokio::test]
    async fn metrics_are_rendered_at_each_request() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let router = DebugPort::new("t", "t", Readiness::default())
            .metrics(move || {
                let n = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                format!("renders {n}\n")
            })
            .router();
        assert_eq!(
            get(&router, "/metrics").await,
            (StatusCode::OK, "renders 1\n".to_owned())
        );
        assert_eq!(
            get(&router, "/metrics").await,
            (StatusCode::OK, "renders 2\n".to_owned())
        );
    }

    #[tokio::test]
    async fn health_follows_the_readiness() {
        let readiness = Readiness::default();
        let router = DebugPort::new("t", "t", readiness.clone()).router();
        assert_eq!(
            get(&router, "/healthz").await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        let outage = readiness.not_ready();
        assert_eq!(
            get(&router, "/healthz").await,
            (StatusCode::SERVICE_UNAVAILABLE, NOT_READY.to_owned())
        );
        drop(outage);
        assert_eq!(
            get(&router, "/healthz").await,
            (StatusCode::OK, "ok\n".to_owned())
        );
    }
}
