//! The admin HTTP API: list, add, update and delete namespaces and buckets
//! at run time, kept in the configuration file so a restart keeps them.
//!
//! ```text
//! GET    /api/admin/config                         the configuration, as JSON
//! PUT    /api/admin/namespaces/{ns}                add or replace a namespace
//! DELETE /api/admin/namespaces/{ns}
//! PUT    /api/admin/namespaces/{ns}/buckets/{b}    add or replace a bucket
//! DELETE /api/admin/namespaces/{ns}/buckets/{b}
//! ```
//!
//! Bodies use the YAML file's keys, as JSON (`{"size": 10, "fill_rate": 5}`).
//! Every change is validated as a whole configuration, written to the file
//! (to a temporary file renamed over it), then applied like a reload:
//! buckets that still exist keep their state. A change that fails
//! validation answers 400 with the error and changes nothing.
//!
//! # Implementation notes
//!
//! One mutex serialises changes; it holds the [`Document`] last written, so
//! the file's comments are not kept but its keys are.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::locks::lock;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;

use super::config::{ConfigError, Document, RawBucket, RawNamespace};
use super::names::check_name;
use super::service::Quota;

/// The admin API's state.
#[derive(Debug)]
pub struct Admin {
    quota: Arc<Quota>,
    path: PathBuf,
    document: Mutex<Document>,
}

impl Admin {
    /// Admin for `quota`, whose configuration was read from `path`.
    ///
    /// # Errors
    ///
    /// If the file cannot be read or parsed.
    pub fn new(quota: Arc<Quota>, path: PathBuf) -> Result<Admin, ConfigError> {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let document = Document::from_yaml(&text)?;
        Ok(Admin {
            quota,
            path,
            document: Mutex::new(document),
        })
    }

    /// Applies `change` to the document; validates, writes and reloads.
    fn change(&self, change: impl FnOnce(&mut Document) -> Result<(), String>) -> Response {
        let mut doc = lock(&self.document);
        let mut next = doc.clone();
        if let Err(e) = change(&mut next) {
            return error(StatusCode::NOT_FOUND, &e);
        }
        let config = match next.validate() {
            Ok(c) => c,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        let tmp = self.path.with_extension("tmp");
        let written =
            std::fs::write(&tmp, next.to_yaml()).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot write {}: {e}", self.path.display()),
            );
        }
        self.quota.reload(config);
        *doc = next;
        (StatusCode::OK, "ok\n").into_response()
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "error": message }).to_string(),
    )
        .into_response()
}

/// The admin routes, to merge into the debug port's router.
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/api/admin/config", get(show))
        .route(
            "/api/admin/namespaces/{ns}",
            put(put_namespace).delete(delete_namespace),
        )
        .route(
            "/api/admin/namespaces/{ns}/buckets/{bucket}",
            put(put_bucket).delete(delete_bucket),
        )
        .with_state(admin)
}

async fn show(State(admin): State<Arc<Admin>>) -> Response {
    let doc = lock(&admin.document).clone();
    match serde_json::to_string(&doc) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))
}

fn check(name: &str) -> Result<(), Response> {
    check_name(name).map_err(|e| error(StatusCode::BAD_REQUEST, &format!("{name:?}: {e}")))
}

async fn put_namespace(
    State(admin): State<Arc<Admin>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = check(&ns) {
        return r;
    }
    let namespace: RawNamespace = match parse(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    admin.change(|doc| {
        doc.namespaces
            .get_or_insert_with(Default::default)
            .insert(ns, namespace);
        Ok(())
    })
}

async fn delete_namespace(State(admin): State<Arc<Admin>>, Path(ns): Path<String>) -> Response {
    admin.change(|doc| {
        doc.namespaces
            .as_mut()
            .and_then(|m| m.remove(&ns))
            .map(|_| ())
            .ok_or_else(|| format!("no namespace {ns:?}"))
    })
}

async fn put_bucket(
    State(admin): State<Arc<Admin>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = check(&ns).and_then(|()| check(&name)) {
        return r;
    }
    let bucket: RawBucket = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    admin.change(|doc| {
        let namespace = doc
            .namespaces
            .as_mut()
            .and_then(|m| m.get_mut(&ns))
            .ok_or_else(|| format!("no namespace {ns:?}"))?;
        namespace
            .buckets
            .get_or_insert_with(Default::default)
            .insert(name, bucket);
        Ok(())
    })
}

async fn delete_bucket(
    State(admin): State<Arc<Admin>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    admin.change(|doc| {
        doc.namespaces
            .as_mut()
            .and_then(|m| m.get_mut(&ns))
            .and_then(|n| n.buckets.as_mut())
            .and_then(|b| b.remove(&name))
            .map(|_| ())
            .ok_or_else(|| format!("no bucket {ns:?}:{name:?}"))
    })
}
