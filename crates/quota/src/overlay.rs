//! The admin API's changes, kept in a file of their own beside the
//! operator's configuration file and applied on top of it, so the
//! operator's file stays exactly as written (comments, key order, `50`
//! not `50.0`).
//!
//! # Implementation notes
//!
//! The overlay is a list of changes, applied in order to the document read
//! from the configuration file: put or delete a namespace, put or delete a
//! bucket. A change that no longer applies (a bucket put into a namespace
//! the operator has since removed from the file) is skipped with a
//! warning; deleting what is not there does nothing. A new change
//! replaces the earlier ones it makes moot (a namespace's put or delete
//! replaces every earlier change to that namespace, a bucket's every
//! earlier change to that bucket), so the file stays as long as the set
//! of differences, not the history.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::{Document, QuotaConfig, QuotaConfigError, RawBucket, RawNamespace};

/// One admin change to the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Change {
    /// Adds or replaces a namespace, its buckets included.
    PutNamespace {
        /// The namespace.
        namespace: String,
        /// Its configuration, in the file's keys.
        config: RawNamespace,
    },
    /// Removes a namespace.
    DeleteNamespace {
        /// The namespace.
        namespace: String,
    },
    /// Adds or replaces a bucket of an existing namespace.
    PutBucket {
        /// The namespace.
        namespace: String,
        /// The bucket.
        bucket: String,
        /// Its configuration, in the file's keys.
        config: RawBucket,
    },
    /// Removes a bucket.
    DeleteBucket {
        /// The namespace.
        namespace: String,
        /// The bucket.
        bucket: String,
    },
}

impl Change {
    /// The namespace it changes.
    fn namespace(&self) -> &str {
        match self {
            Change::PutNamespace { namespace, .. }
            | Change::DeleteNamespace { namespace }
            | Change::PutBucket { namespace, .. }
            | Change::DeleteBucket { namespace, .. } => namespace,
        }
    }

    /// The bucket it changes, if it changes one bucket.
    fn bucket(&self) -> Option<&str> {
        match self {
            Change::PutBucket { bucket, .. } | Change::DeleteBucket { bucket, .. } => Some(bucket),
            Change::PutNamespace { .. } | Change::DeleteNamespace { .. } => None,
        }
    }

    /// The operation's name, as in the overlay file.
    pub(crate) fn op(&self) -> &'static str {
        match self {
            Change::PutNamespace { .. } => "put_namespace",
            Change::DeleteNamespace { .. } => "delete_namespace",
            Change::PutBucket { .. } => "put_bucket",
            Change::DeleteBucket { .. } => "delete_bucket",
        }
    }

    /// Applies the change to `doc`.
    ///
    /// # Errors
    ///
    /// What is missing, when the namespace or bucket to change is not
    /// there (`doc` is then unchanged).
    pub(crate) fn apply(&self, doc: &mut Document) -> Result<(), String> {
        let namespaces = &mut doc.namespaces;
        match self {
            Change::PutNamespace { namespace, config } => {
                namespaces
                    .get_or_insert_with(Default::default)
                    .insert(namespace.clone(), config.clone());
            }
            Change::DeleteNamespace { namespace } => {
                namespaces
                    .as_mut()
                    .and_then(|m| m.remove(namespace))
                    .ok_or_else(|| format!("no namespace {namespace:?}"))?;
            }
            Change::PutBucket {
                namespace,
                bucket,
                config,
            } => {
                namespaces
                    .as_mut()
                    .and_then(|m| m.get_mut(namespace))
                    .ok_or_else(|| format!("no namespace {namespace:?}"))?
                    .buckets
                    .get_or_insert_with(Default::default)
                    .insert(bucket.clone(), config.clone());
            }
            Change::DeleteBucket { namespace, bucket } => {
                namespaces
                    .as_mut()
                    .and_then(|m| m.get_mut(namespace))
                    .and_then(|n| n.buckets.as_mut())
                    .and_then(|b| b.remove(bucket))
                    .ok_or_else(|| format!("no bucket {namespace:?}:{bucket:?}"))?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::PutNamespace { namespace, config } => write!(
                f,
                "put namespace {namespace:?}: {}",
                serde_json::to_string(config).unwrap_or_default()
            ),
            Change::DeleteNamespace { namespace } => write!(f, "delete namespace {namespace:?}"),
            Change::PutBucket {
                namespace,
                bucket,
                config,
            } => write!(
                f,
                "put bucket {namespace:?}:{bucket:?}: {}",
                serde_json::to_string(config).unwrap_or_default()
            ),
            Change::DeleteBucket { namespace, bucket } => {
                write!(f, "delete bucket {namespace:?}:{bucket:?}")
            }
        }
    }
}

/// The admin API's changes to a configuration file, applied on top of it.
///
/// # Examples
///
/// ```
/// use tollgate_quota::Overlay;
///
/// let text = "changes:\n- op: delete_bucket\n  namespace: svc\n  bucket: db\n";
/// let overlay = Overlay::from_yaml(text)?;
/// let changes: Vec<_> = overlay.changes().collect();
/// assert_eq!(changes, [("delete_bucket", "svc", Some("db"))]);
/// assert_eq!(overlay.to_yaml(), text);
/// assert_eq!(
///     Overlay::path_for("/etc/tollgate/quota.yaml".as_ref()),
///     std::path::Path::new("/etc/tollgate/quota.admin.yaml"),
/// );
/// # Ok::<(), tollgate_quota::QuotaConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    #[serde(default)]
    changes: Vec<Change>,
}

impl Overlay {
    /// Where the changes to the configuration file `config` are kept:
    /// beside it, `quota.yaml`'s in `quota.admin.yaml`.
    pub fn path_for(config: &Path) -> PathBuf {
        let stem = config
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        config.with_file_name(format!("{stem}.admin.yaml"))
    }

    /// Parses an overlay.
    ///
    /// # Errors
    ///
    /// [`QuotaConfigError::Parse`] for malformed YAML or unknown keys.
    pub fn from_yaml(text: &str) -> Result<Overlay, QuotaConfigError> {
        if text.trim().is_empty() {
            return Ok(Overlay::default());
        }
        serde_norway::from_str(text).map_err(QuotaConfigError::Parse)
    }

    /// Reads the overlay file at `path`; no file is no changes.
    ///
    /// # Errors
    ///
    /// [`QuotaConfigError::Read`] if it exists but cannot be read, else
    /// as [`Overlay::from_yaml`].
    pub fn read(path: &Path) -> Result<Overlay, QuotaConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Overlay::from_yaml(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Overlay::default()),
            Err(source) => Err(QuotaConfigError::Read {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// The overlay as YAML.
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(self).unwrap_or_default()
    }

    /// The changes, in the order they apply: each one's operation (as in
    /// the file: `put_namespace`, `delete_namespace`, `put_bucket`,
    /// `delete_bucket`), namespace, and bucket (none for a whole
    /// namespace).
    pub fn changes(&self) -> impl ExactSizeIterator<Item = (&'static str, &str, Option<&str>)> {
        self.changes
            .iter()
            .map(|c| (c.op(), c.namespace(), c.bucket()))
    }

    /// Adds `change`, dropping the earlier changes it makes moot.
    pub(crate) fn push(&mut self, change: Change) {
        let namespace = change.namespace();
        match change.bucket() {
            None => self.changes.retain(|c| c.namespace() != namespace),
            Some(bucket) => self
                .changes
                .retain(|c| c.namespace() != namespace || c.bucket() != Some(bucket)),
        }
        self.changes.push(change);
    }

    /// Applies the changes to `doc` in order; returns those that no longer
    /// apply (skipped), with why. Deleting what is not there is not
    /// counted: it is already as the change wants it.
    pub(crate) fn apply(&self, doc: &mut Document) -> Vec<(Change, String)> {
        let mut skipped = Vec::new();
        for change in &self.changes {
            if let Err(why) = change.apply(doc) {
                if matches!(change, Change::PutBucket { .. }) {
                    skipped.push((change.clone(), why));
                }
            }
        }
        skipped
    }
}

/// Reads the configuration file at `path` with the admin API's changes
/// (its [`Overlay::path_for`], if there is one) applied on top, and
/// validates the result. A change that no longer applies is logged and
/// skipped.
///
/// # Errors
///
/// As [`QuotaConfig::from_file`]; [`QuotaConfigError::Overlay`] for an
/// overlay that cannot be read or parsed.
pub fn load(path: &Path) -> Result<QuotaConfig, QuotaConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| QuotaConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut doc = Document::from_yaml(&text)?;
    let overlay_path = Overlay::path_for(path);
    let overlay = Overlay::read(&overlay_path).map_err(|e| QuotaConfigError::Overlay {
        path: overlay_path.clone(),
        source: Box::new(e),
    })?;
    for (change, why) in overlay.apply(&mut doc) {
        tracing::warn!(overlay = %overlay_path.display(), "admin change skipped: {change}: {why}");
    }
    doc.validate()
}
