//! The admin HTTP API: list, add, update and delete namespaces and buckets
//! at run time, kept in the configuration file, and in etcd when
//! configured ([`Admin::with_etcd`]), so a restart keeps them.
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
//! Every change is validated as a whole configuration, stored in etcd (when
//! configured), written to the file (to a temporary file renamed over it),
//! then applied like a reload:
//! buckets that still exist keep their state. A change that fails
//! validation answers 400 with the error and changes nothing.
//!
//! # Implementation notes
//!
//! One mutex serialises changes; it holds the [`Document`] last written, so
//! the file's comments are not kept but its keys are. With etcd, the
//! document is stored there first: if etcd cannot be reached the change
//! answers 503 and nothing is written or applied. At start the document in
//! etcd, when its key exists, wins over the file (it is validated, applied
//! and written to the file); otherwise the file's document is stored.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;

use tokio::sync::Mutex;

use super::config::{Document, QuotaConfigError, RawBucket, RawNamespace};
use super::etcd::EtcdDocument;
use super::names::check_name;
use super::service::Quota;
use tollgate_service::EtcdError;

/// The admin API's state.
#[derive(Debug)]
pub struct Admin {
    quota: Arc<Quota>,
    path: PathBuf,
    etcd: Option<EtcdDocument>,
    document: Mutex<Document>,
}

/// Why an [`Admin`] with etcd could not start.
#[derive(Debug)]
pub enum AdminError {
    /// The file, or the document in etcd, is not a valid configuration.
    Config(QuotaConfigError),
    /// etcd could not be read or written.
    Etcd(EtcdError),
    /// The document from etcd could not be written to the file.
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Config(e) => write!(f, "quota configuration: {e}"),
            AdminError::Etcd(e) => e.fmt(f),
            AdminError::Write { path, .. } => write!(f, "cannot write {}", path.display()),
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Their messages are already in this error's: go on from their causes.
            AdminError::Config(e) => e.source(),
            AdminError::Etcd(e) => e.source(),
            AdminError::Write { source, .. } => Some(source),
        }
    }
}

impl Admin {
    /// Admin for `quota`, whose configuration was read from `path`.
    ///
    /// # Errors
    ///
    /// If the file cannot be read or parsed.
    pub fn new(quota: Arc<Quota>, path: PathBuf) -> Result<Admin, QuotaConfigError> {
        let text = std::fs::read_to_string(&path).map_err(|source| QuotaConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let document = Document::from_yaml(&text)?;
        Ok(Admin {
            quota,
            path,
            etcd: None,
            document: Mutex::new(document),
        })
    }

    /// Admin for `quota`, whose configuration was read from `path`, kept in
    /// etcd too. If `etcd`'s key exists, its document replaces the file's:
    /// it is validated, applied to `quota` (buckets that still exist keep
    /// their state) and written to `path`. Otherwise the file's document
    /// is stored in etcd.
    ///
    /// # Errors
    ///
    /// [`AdminError::Config`] if the file or the document in etcd cannot be
    /// read or is invalid (naming the namespace, bucket and field);
    /// [`AdminError::Etcd`] if etcd cannot be reached.
    pub async fn with_etcd(
        quota: Arc<Quota>,
        path: PathBuf,
        etcd: EtcdDocument,
    ) -> Result<Admin, AdminError> {
        let mut admin = Admin::new(quota, path).map_err(AdminError::Config)?;
        match etcd.load().await.map_err(AdminError::Etcd)? {
            Some(text) => {
                let document = Document::from_yaml(&text).map_err(AdminError::Config)?;
                let config = document.validate().map_err(AdminError::Config)?;
                admin
                    .write_file(&document)
                    .map_err(|source| AdminError::Write {
                        path: admin.path.clone(),
                        source,
                    })?;
                admin.quota.reload(config);
                admin.document = Mutex::new(document);
            }
            None => {
                let text = admin.document.get_mut().to_yaml();
                etcd.save(&text).await.map_err(AdminError::Etcd)?;
            }
        }
        admin.etcd = Some(etcd);
        Ok(admin)
    }

    /// Writes `document` to the file, through a temporary file renamed over it.
    ///
    /// The temporary file reaches the disk before the rename, so a crash
    /// leaves the old document or the new one, never a torn one; a failed
    /// write (a full disk) removes the temporary file and leaves the old
    /// document in place.
    fn write_file(&self, document: &Document) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, document.to_yaml().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if written.is_err() {
            // Best effort: the error that matters is the write's.
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Applies `change` to the document; validates, stores, writes and
    /// reloads.
    async fn change(&self, change: impl FnOnce(&mut Document) -> Result<(), String>) -> Response {
        let mut doc = self.document.lock().await;
        let mut next = doc.clone();
        if let Err(e) = change(&mut next) {
            return error(StatusCode::NOT_FOUND, &e);
        }
        let config = match next.validate() {
            Ok(c) => c,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        if let Some(etcd) = &self.etcd {
            if let Err(e) = etcd.save(&next.to_yaml()).await {
                return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            }
        }
        if let Err(e) = self.write_file(&next) {
            let mut message = format!("cannot write {}: {e}; nothing changed", self.path.display());
            // etcd already holds the change: put the previous document
            // back, so that a refused change is refused everywhere.
            if let Some(etcd) = &self.etcd {
                if let Err(undo) = etcd.save(&doc.to_yaml()).await {
                    message = format!(
                        "cannot write {}: {e}; the change is in etcd (putting the previous \
                         document back failed: {undo}) but not applied here",
                        self.path.display()
                    );
                }
            }
            return error(StatusCode::INTERNAL_SERVER_ERROR, &message);
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
    let doc = admin.document.lock().await.clone();
    match serde_json::to_string(&doc) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

// A rejected request is answered at once with the error response these
// return; its size costs nothing on a path taken once per admin call.
#[allow(clippy::result_large_err)]
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))
}

#[allow(clippy::result_large_err)]
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
    admin
        .change(|doc| {
            doc.namespaces
                .get_or_insert_with(Default::default)
                .insert(ns, namespace);
            Ok(())
        })
        .await
}

async fn delete_namespace(State(admin): State<Arc<Admin>>, Path(ns): Path<String>) -> Response {
    admin
        .change(|doc| {
            doc.namespaces
                .as_mut()
                .and_then(|m| m.remove(&ns))
                .map(|_| ())
                .ok_or_else(|| format!("no namespace {ns:?}"))
        })
        .await
}

async fn put_bucket(
    State(admin): State<Arc<Admin>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    for part in [&ns, &name] {
        if let Err(r) = check(part) {
            return r;
        }
    }
    let bucket: RawBucket = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    admin
        .change(|doc| {
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
        .await
}

async fn delete_bucket(
    State(admin): State<Arc<Admin>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    admin
        .change(|doc| {
            doc.namespaces
                .as_mut()
                .and_then(|m| m.get_mut(&ns))
                .and_then(|n| n.buckets.as_mut())
                .and_then(|b| b.remove(&name))
                .map(|_| ())
                .ok_or_else(|| format!("no bucket {ns:?}:{name:?}"))
        })
        .await
}
