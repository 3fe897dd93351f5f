//! The admin HTTP API: list, add, update and delete namespaces and buckets
//! at run time, kept in a file of their own beside the configuration file
//! (its [`Overlay`]), and in etcd when configured ([`Admin::with_etcd`]),
//! so a restart keeps them. The operator's file is never written.
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
//! Every change is applied to the configuration file as it is now with the
//! earlier changes on top, validated as a whole configuration, stored in
//! etcd (when configured), written to the overlay (to a temporary file
//! renamed over it), applied like a reload (buckets that still exist keep
//! their state) and logged. A change that fails validation answers 400
//! with the error and changes nothing.
//!
//! # Implementation notes
//!
//! One mutex serialises changes; it holds the overlay last written. The
//! configuration file is read again for every change, so the operator's
//! own edits to it (reloaded by the file watch) are kept under the
//! changes. With etcd, the overlay is stored there first: if etcd cannot
//! be reached the change answers 503 and nothing is written or applied.
//! At start the overlay in etcd, when its key exists, wins over the local
//! one (it is validated, applied and written beside the file); otherwise
//! the local one is stored.

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
use super::names::check_name;
use super::overlay::{Change, Overlay};
use super::service::Quota;
use tollgate_service::{EtcdError, EtcdKey};

/// The admin API's state.
#[derive(Debug)]
pub struct Admin {
    quota: Arc<Quota>,
    /// The operator's configuration file, only ever read.
    path: PathBuf,
    /// Where the changes are written: [`Overlay::path_for`] `path`.
    overlay_path: PathBuf,
    etcd: Option<EtcdKey>,
    overlay: Mutex<Overlay>,
}

/// Why an [`Admin`] with etcd could not start.
#[derive(Debug)]
pub enum AdminError {
    /// The file, or the overlay in etcd, is not a valid configuration.
    Config(QuotaConfigError),
    /// etcd could not be read or written.
    Etcd(EtcdError),
    /// The overlay from etcd could not be written beside the file.
    Write {
        /// The overlay file.
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
    /// Admin for `quota`, whose configuration was read from `path` with
    /// the changes in its overlay ([`Overlay::path_for`]) on top (as
    /// [`load_config`](super::load_config) reads it).
    ///
    /// # Errors
    ///
    /// If the overlay exists but cannot be read or parsed.
    pub fn new(quota: Arc<Quota>, path: PathBuf) -> Result<Admin, QuotaConfigError> {
        let overlay_path = Overlay::path_for(&path);
        let overlay = Overlay::read(&overlay_path).map_err(|e| QuotaConfigError::Overlay {
            path: overlay_path.clone(),
            source: Box::new(e),
        })?;
        Ok(Admin {
            quota,
            path,
            overlay_path,
            etcd: None,
            overlay: Mutex::new(overlay),
        })
    }

    /// Admin for `quota`, whose configuration was read from `path`, with
    /// its changes kept in etcd too. If `etcd`'s key exists, the changes
    /// stored there replace the local overlay: they are applied on top of
    /// the file, validated, applied to `quota` (buckets that still exist
    /// keep their state) and written beside `path`. Otherwise the local
    /// overlay is stored in etcd.
    ///
    /// # Errors
    ///
    /// [`AdminError::Config`] if the file or the overlay in etcd cannot be
    /// read or is invalid (naming the namespace, bucket and field);
    /// [`AdminError::Etcd`] if etcd cannot be reached.
    pub async fn with_etcd(
        quota: Arc<Quota>,
        path: PathBuf,
        etcd: EtcdKey,
    ) -> Result<Admin, AdminError> {
        let mut admin = Admin::new(quota, path).map_err(AdminError::Config)?;
        match etcd.load().await.map_err(AdminError::Etcd)? {
            Some(text) => {
                let overlay = Overlay::from_yaml(&text).map_err(AdminError::Config)?;
                let mut doc = admin.file_document().map_err(AdminError::Config)?;
                for (change, why) in overlay.apply(&mut doc) {
                    tracing::warn!(
                        etcd_key = etcd.key(),
                        "admin change skipped: {change}: {why}"
                    );
                }
                let config = doc.validate().map_err(AdminError::Config)?;
                admin
                    .write_overlay(&overlay)
                    .map_err(|source| AdminError::Write {
                        path: admin.overlay_path.clone(),
                        source,
                    })?;
                admin.quota.reload(config);
                admin.overlay = Mutex::new(overlay);
            }
            None => {
                let text = admin.overlay.get_mut().to_yaml();
                etcd.save(&text).await.map_err(AdminError::Etcd)?;
            }
        }
        admin.etcd = Some(etcd);
        Ok(admin)
    }

    /// The operator's file as it is now.
    fn file_document(&self) -> Result<Document, QuotaConfigError> {
        let text =
            std::fs::read_to_string(&self.path).map_err(|source| QuotaConfigError::Read {
                path: self.path.clone(),
                source,
            })?;
        Document::from_yaml(&text)
    }

    /// The configuration in force: the file with `overlay` on top.
    fn document(&self, overlay: &Overlay) -> Result<Document, QuotaConfigError> {
        let mut doc = self.file_document()?;
        overlay.apply(&mut doc);
        Ok(doc)
    }

    /// Writes `overlay` beside the file, through a temporary file renamed
    /// over it.
    ///
    /// The temporary file reaches the disk before the rename, so a crash
    /// leaves the old overlay or the new one, never a torn one; a failed
    /// write (a full disk) removes the temporary file and leaves the old
    /// overlay in place.
    fn write_overlay(&self, overlay: &Overlay) -> std::io::Result<()> {
        let tmp = self.overlay_path.with_extension("tmp");
        let text = format!(
            "# Changes made through the admin API of `tollgate quota`, applied in\n\
             # order on top of {}. Delete this file to drop them.\n{}",
            self.path.display(),
            overlay.to_yaml()
        );
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.overlay_path)
        })();
        if written.is_err() {
            // Best effort: the error that matters is the write's.
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Applies `change` on top of the file and the earlier changes;
    /// validates, stores, writes, reloads and logs.
    async fn change(&self, change: Change) -> Response {
        let mut overlay = self.overlay.lock().await;
        let mut next = match self.document(&overlay) {
            Ok(doc) => doc,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        };
        if let Err(e) = change.apply(&mut next) {
            return error(StatusCode::NOT_FOUND, &e);
        }
        let config = match next.validate() {
            Ok(c) => c,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        let mut next_overlay = overlay.clone();
        next_overlay.push(change.clone());
        if let Some(etcd) = &self.etcd {
            if let Err(e) = etcd.save(&next_overlay.to_yaml()).await {
                return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            }
        }
        if let Err(e) = self.write_overlay(&next_overlay) {
            let path = self.overlay_path.display();
            let mut message = format!("cannot write {path}: {e}; nothing changed");
            // etcd already holds the change: put the previous overlay
            // back, so that a refused change is refused everywhere.
            if let Some(etcd) = &self.etcd {
                if let Err(undo) = etcd.save(&overlay.to_yaml()).await {
                    message = format!(
                        "cannot write {path}: {e}; the change is in etcd (putting the previous \
                         changes back failed: {undo}) but not applied here"
                    );
                }
            }
            return error(StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
        self.quota.reload(config);
        tracing::info!(
            op = change.op(),
            overlay = %self.overlay_path.display(),
            "admin change applied: {change}"
        );
        *overlay = next_overlay;
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
    let doc = {
        let overlay = admin.overlay.lock().await;
        match admin.document(&overlay) {
            Ok(doc) => doc,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    };
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
        .change(Change::PutNamespace {
            namespace: ns,
            config: namespace,
        })
        .await
}

async fn delete_namespace(State(admin): State<Arc<Admin>>, Path(ns): Path<String>) -> Response {
    admin
        .change(Change::DeleteNamespace { namespace: ns })
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
        .change(Change::PutBucket {
            namespace: ns,
            bucket: name,
            config: bucket,
        })
        .await
}

async fn delete_bucket(
    State(admin): State<Arc<Admin>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    admin
        .change(Change::DeleteBucket {
            namespace: ns,
            bucket: name,
        })
        .await
}
