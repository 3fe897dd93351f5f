//! The HTTP debug port: `/` (an index of the pages below), `/debug/status`
//! (HTML overview), `/debug/resources` (one resource's leases), `/metrics`
//! (Prometheus) and `/healthz`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::server::Server;
use tollgate_service::{html_escape as esc, DebugPort};

/// Serves the debug endpoints for `server` on `listener` until `shutdown`
/// completes.
///
/// # Errors
///
/// An I/O error from the listener.
pub async fn serve(
    server: Server,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(server))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The debug endpoints as an axum router: the service kit's debug port
/// (the index, `/metrics`, `/healthz` following the server's readiness)
/// and the Doorman pages.
pub fn router(server: Server) -> Router {
    let metrics = server.clone();
    let mut port = DebugPort::new(
        "tollgate",
        "tollgate: Doorman server",
        server.readiness().clone(),
    )
    .metrics(move || metrics.metrics_text());
    for (path, what) in PAGES {
        port = port.page(path, what);
    }
    port.router().merge(
        Router::new()
            .route("/debug/status", get(status))
            .route("/debug/resources", get(resources))
            .with_state(server),
    )
}

/// Whether `addr` (`host:port`) names every interface rather than one
/// host: `0.0.0.0:15000`, `[::]:15000`.
fn is_wildcard(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified())
}

/// Percent-encodes a query value.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The pages the debug port serves, with what each shows, as its index
/// lists them.
const PAGES: [(&str, &str); 4] = [
    (
        "/debug/status",
        "mastership and every resource: capacity, leases held and wanted, learning mode",
    ),
    (
        "/debug/resources?resource=ID",
        "one resource's leases, client by client (linked from the status page)",
    ),
    ("/metrics", "Prometheus metrics"),
    ("/healthz", "ok, or 503 while etcd is unreachable"),
];

async fn status(State(server): State<Server>) -> Html<String> {
    let m = server.current_mastership();
    let mut page = String::from(
        "<!DOCTYPE html>\n<html><head><title>tollgate status</title></head><body>\n<h1>tollgate: Doorman server status</h1>\n",
    );
    let master = m.master_address.as_deref().unwrap_or("unknown");
    let _ = writeln!(
        page,
        "<p>Is master: <b>{}</b>. Master address: {}.</p>",
        m.is_master,
        esc(master)
    );
    if is_wildcard(master) {
        page.push_str(
            "<p><b>Hint:</b> the master address is a wildcard (the server listens on every \
             interface): clients redirected to it, and followers of an election, cannot reach \
             it. Start the server with <code>--advertise HOST:PORT</code>, the address others \
             reach it at.</p>\n",
        );
    }
    page.push_str(
        "<table border=1 cellpadding=4>\n<tr><th>resource</th><th>template</th><th>capacity</th><th>sum of has</th><th>sum of wants</th><th>clients</th><th>subclients</th><th>learning mode</th><th>algorithm</th></tr>\n",
    );
    for r in server.status() {
        let _ = writeln!(
            page,
            "<tr><td><a href=\"/debug/resources?resource={}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td></tr>",
            query_escape(&r.id),
            esc(&r.id),
            esc(&r.glob),
            r.capacity,
            r.sum_has,
            r.sum_wants,
            r.clients,
            r.subclients,
            r.learning,
            r.algorithm
        );
    }
    page.push_str("</table>\n</body></html>\n");
    Html(page)
}

async fn resources(
    State(server): State<Server>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(id) = q.get("resource") else {
        return (StatusCode::BAD_REQUEST, "missing ?resource=ID\n").into_response();
    };
    let Some(leases) = server.leases(id) else {
        return (StatusCode::NOT_FOUND, format!("no resource {id:?}\n")).into_response();
    };
    let mut page = format!(
        "<!DOCTYPE html>\n<html><head><title>{0}</title></head><body>\n<h1>Resource {0}</h1>\n<table border=1 cellpadding=4>\n<tr><th>client</th><th>has</th><th>wants</th><th>subclients</th><th>expiry (Unix s)</th><th>refresh interval (s)</th></tr>\n",
        esc(id)
    );
    for (client, l) in leases {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&client),
            l.has,
            l.wants,
            l.subclients,
            l.expiry.as_secs(),
            l.refresh_interval.as_secs()
        );
    }
    page.push_str("</table>\n</body></html>\n");
    Html(page).into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use tokio::sync::watch;
    use tower::ServiceExt as _;

    use super::*;
    use crate::clock::SystemWallClock;
    use crate::config::ServerConfig;
    use crate::election::single::SingleElection;
    use crate::election::{Election, Mastership};
    use tollgate_service::Readiness;

    /// An election whose readiness the test sets.
    #[derive(Debug)]
    struct Controlled {
        tx: watch::Sender<Mastership>,
        readiness: Readiness,
    }

    impl Election for Controlled {
        fn subscribe(&self) -> watch::Receiver<Mastership> {
            self.tx.subscribe()
        }

        fn readiness(&self) -> Readiness {
            self.readiness.clone()
        }
    }

    async fn healthz(server: &Server) -> (StatusCode, String) {
        let request = Request::get("/healthz").body(Body::empty()).unwrap();
        let response = router(server.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn health_answers_not_ready_while_the_election_cannot_reach_etcd() {
        let election = Controlled {
            tx: watch::Sender::new(Mastership::master(None)),
            readiness: Readiness::default(),
        };
        let server = Server::builder(ServerConfig::builtin())
            .election(&election)
            .clock(Arc::new(SystemWallClock))
            .build();
        assert_eq!(healthz(&server).await, (StatusCode::OK, "ok\n".to_owned()));

        let outage = election.readiness.not_ready();
        assert_eq!(
            healthz(&server).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: etcd unreachable\n".to_owned()
            )
        );
        drop(outage);
        assert_eq!(healthz(&server).await, (StatusCode::OK, "ok\n".to_owned()));
    }

    #[tokio::test]
    async fn the_root_is_an_index_linking_every_page() {
        let server = Server::builder(ServerConfig::builtin()).build();
        let request = Request::get("/").body(Body::empty()).unwrap();
        let response = router(server.clone()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        for path in ["/debug/status", "/metrics", "/healthz"] {
            assert!(body.contains(&format!("<a href=\"{path}\">")), "{body}");
            let request = Request::get(path).body(Body::empty()).unwrap();
            let response = router(server.clone()).oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
        }
        assert!(
            body.contains("<code>/debug/resources?resource=ID</code>"),
            "{body}"
        );
    }

    async fn page(advertised: &str) -> String {
        let election = SingleElection::new(Some(advertised.to_owned()));
        let server = Server::builder(ServerConfig::builtin())
            .election(&election)
            .clock(Arc::new(SystemWallClock))
            .build();
        status(State(server)).await.0
    }

    #[tokio::test]
    async fn a_wildcard_master_address_comes_with_a_hint() {
        for wildcard in ["0.0.0.0:15000", "[::]:15000"] {
            let page = page(wildcard).await;
            assert!(
                page.contains(&format!("Master address: {wildcard}.</p>")),
                "{page}"
            );
            assert!(
                page.contains("<code>--advertise HOST:PORT</code>"),
                "{page}"
            );
        }
        for reachable in ["10.0.0.2:15000", "doorman.example:15000", "[::1]:15000"] {
            let page = page(reachable).await;
            assert!(page.contains(reachable), "{page}");
            assert!(!page.contains("Hint"), "{page}");
        }
    }
}
