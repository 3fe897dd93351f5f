//! The quota service's configuration: YAML in the reference quotaservice's
//! format, validated into namespaces and bucket settings.
//!
//! The reference's keys are accepted as they are, including the ones this
//! server does not use (`metrics_enabled`, `admin_port`,
//! `filler_frequency_millis`, `version`, and the `name` / `namespace` echoes
//! inside namespaces and buckets):
//!
//! ```yaml
//! global_default_bucket:        # used when nothing else matches (optional)
//!   size: 100
//!   fill_rate: 50
//! namespaces:
//!   Pinky_TheBrain:
//!     buckets:
//!       UserService_getUser: {size: 20, fill_rate: 10, max_debt_millis: 5000}
//!   TheBrain_userLogins:
//!     max_dynamic_buckets: 10000
//!     dynamic_bucket_template: {size: 1, fill_rate: 1, max_idle_millis: 60000}
//!   Pinky_PinkyMySQL:
//!     default_bucket: {size: 500, fill_rate: 200, wait_timeout_millis: 50}
//! ```
//!
//! As in the reference, a field left out or set to 0 takes its default:
//! `size` 100, `fill_rate` 50 per second, `wait_timeout_millis` 1000,
//! `max_idle_millis` -1 (never reaped; any negative value means never),
//! `max_debt_millis` 10000, `max_tokens_per_request` the fill rate (at least
//! 1). Unlike the reference, `fill_rate` may be fractional (`0.2` is one
//! token every 5 s; the reference truncates it to 0 and so runs at 50/s).
//! A namespace may have a default bucket or a dynamic bucket template, not
//! both; `max_dynamic_buckets: 0` means no cap of the namespace's own, only
//! the server-wide one (see [`QuotaLimits`](super::QuotaLimits)). Names are any
//! non-empty string up to [`MAX_NAME_LEN`](super::names::MAX_NAME_LEN)
//! bytes (`test.namespace`, `bad-name`), except the reference's reserved
//! `___GLOBAL___` namespace and `___DEFAULT_BUCKET___` bucket.
//!
//! Every validation error is one line naming the namespace, the bucket and
//! the field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::names::{check_name, NameError};
use super::store::{OnError, QuotaStore};
use tollgate::BucketSettings;
use tollgate::RateSpec;

/// The bucket name under which a namespace's default bucket is kept.
pub const DEFAULT_BUCKET_NAME: &str = "___DEFAULT_BUCKET___";
/// The namespace under which the global default bucket is kept.
pub const GLOBAL_NAMESPACE: &str = "___GLOBAL___";

/// One bucket's validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketConfig {
    /// Tokens the bucket holds when full.
    pub size: u64,
    /// Tokens added per second, as written.
    pub fill_rate: f64,
    /// How long a request may be told to wait (it may ask for less).
    pub wait_timeout: Duration,
    /// How long the bucket may go unused before it is removed; `None`: never.
    pub max_idle: Option<Duration>,
    /// How far into the future requests may claim tokens.
    pub max_debt: Duration,
    /// The most tokens one request may ask for.
    pub max_tokens_per_request: u64,
    rate: RateSpec,
}

impl BucketConfig {
    /// The settings of the [`TokenBucket`](tollgate::TokenBucket) that enforces
    /// this bucket.
    pub fn settings(&self) -> BucketSettings {
        BucketSettings::new(self.rate)
            .size(self.size)
            .max_debt(self.max_debt)
            .max_wait(self.wait_timeout)
    }

    /// The settings for a share of this bucket filled at `rate` tokens per
    /// second (a cluster member's lease): the size shrinks in proportion,
    /// to at least one token, so the members' bursts add up to about the
    /// configured size. A rate below the lowest representable one (0.001/s)
    /// is raised to it.
    pub fn share_settings(&self, rate: f64) -> BucketSettings {
        let rate = if rate.is_finite() {
            rate.clamp(RateSpec::MIN_OPS_PER_SEC, self.fill_rate)
        } else {
            RateSpec::MIN_OPS_PER_SEC
        };
        let spec = RateSpec::new(rate).unwrap_or(self.rate);
        let size = ((self.size as f64) * rate / self.fill_rate).ceil().max(1.0) as u64;
        BucketSettings::new(spec)
            .size(size.min(self.size))
            .max_debt(self.max_debt)
            .max_wait(self.wait_timeout)
    }
}

/// One namespace's validated configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamespaceConfig {
    /// The bucket used for names that have no bucket of their own.
    pub default_bucket: Option<BucketConfig>,
    /// The template of buckets created on first use of a name.
    pub dynamic_bucket_template: Option<BucketConfig>,
    /// The most dynamic buckets alive at once; 0: the server's cap.
    pub max_dynamic_buckets: u64,
    /// Named buckets.
    pub buckets: BTreeMap<String, BucketConfig>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuotaConfig {
    /// The bucket used when the namespace is unknown or has no bucket for
    /// the name.
    pub global_default_bucket: Option<BucketConfig>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, NamespaceConfig>,
    /// The `store:` section: where the buckets are kept in Redis.
    store: Option<QuotaStore>,
}

/// Why a configuration was rejected.
#[derive(Debug)]
pub enum QuotaConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not YAML of the expected shape.
    Parse(serde_norway::Error),
    /// A value is out of range or inconsistent.
    Invalid {
        /// The namespace, if the fault is inside one.
        namespace: Option<String>,
        /// The bucket (or `default_bucket`, `dynamic_bucket_template`,
        /// `global_default_bucket`), if the fault is inside one.
        bucket: Option<String>,
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The file of admin changes beside the configuration file is bad.
    Overlay {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: Box<QuotaConfigError>,
    },
}

impl fmt::Display for QuotaConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaConfigError::Read { path, .. } => write!(f, "cannot read {}", path.display()),
            QuotaConfigError::Parse(_) => f.write_str("invalid quota configuration YAML"),
            QuotaConfigError::Invalid {
                namespace,
                bucket,
                field,
                problem,
            } => {
                if let Some(ns) = namespace {
                    write!(f, "namespace {ns:?}: ")?;
                }
                if let Some(b) = bucket {
                    write!(f, "bucket {b:?}: ")?;
                }
                write!(f, "{field}: {problem}")
            }
            QuotaConfigError::Overlay { path, source } => {
                write!(f, "{} (the admin API's changes): {source}", path.display())
            }
        }
    }
}

impl std::error::Error for QuotaConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QuotaConfigError::Read { source, .. } => Some(source),
            QuotaConfigError::Parse(e) => Some(e),
            QuotaConfigError::Invalid { .. } => None,
            // Its message is already in this error's: go on from its cause.
            QuotaConfigError::Overlay { source, .. } => source.source(),
        }
    }
}

/// A configuration file as written: the reference's keys, unvalidated.
/// [`Document::validate`] turns it into a [`QuotaConfig`]; the admin API edits
/// it and writes it back, so a restart keeps what was changed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Document {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) global_default_bucket: Option<RawBucket>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) namespaces: Option<BTreeMap<String, RawNamespace>>,
    // Keys of the reference's file that this server ignores but keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<serde_norway::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metrics_enabled: Option<serde_norway::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admin_port: Option<serde_norway::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filler_frequency_millis: Option<serde_norway::Value>,
    // Tollgate's own: the buckets kept in Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    store: Option<RawStore>,
}

/// The `store:` section as written (see [`QuotaStore`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cluster: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca: Option<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pool_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    connect_timeout_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<u32>,
}

impl RawStore {
    fn validate(&self) -> Result<QuotaStore, QuotaConfigError> {
        let invalid = |field: &'static str, problem: String| QuotaConfigError::Invalid {
            namespace: None,
            bucket: None,
            field,
            problem,
        };
        let mut store = match (&self.url, self.cluster.is_empty()) {
            (Some(url), true) => {
                QuotaStore::new(url.as_str()).map_err(|e| invalid("store.url", e.to_string()))?
            }
            (None, false) => QuotaStore::cluster(self.cluster.iter().cloned())
                .map_err(|e| invalid("store.cluster", e.to_string()))?,
            _ => {
                return Err(invalid(
                    "store",
                    "give either a url or a cluster seed list".into(),
                ))
            }
        };
        if let Some(ca) = &self.ca {
            store = store.ca(ca.clone());
        }
        if let Some(prefix) = &self.prefix {
            store = store.prefix(prefix.clone());
        }
        if let Some(n) = self.pool_size {
            if n == 0 {
                return Err(invalid("store.pool_size", "must be at least 1".into()));
            }
            store = store.pool_size(n);
        }
        if let Some(ms) = self.deadline_millis {
            if ms == 0 {
                return Err(invalid(
                    "store.deadline_millis",
                    "must be at least 1".into(),
                ));
            }
            store = store.deadline(Duration::from_millis(ms));
        }
        if let Some(ms) = self.connect_timeout_millis {
            if ms == 0 {
                return Err(invalid(
                    "store.connect_timeout_millis",
                    "must be at least 1".into(),
                ));
            }
            store = store.connect_timeout(Duration::from_millis(ms));
        }
        if let Some(mode) = &self.on_error {
            let mode = mode.parse::<OnError>().map_err(|_| {
                invalid(
                    "store.on_error",
                    format!("{mode:?} is none of allow, deny, local"),
                )
            })?;
            store = store.on_error(mode);
        }
        if let Some(n) = self.replicas {
            if n == 0 {
                return Err(invalid("store.replicas", "must be at least 1".into()));
            }
            store = store.replicas(n);
        }
        Ok(store)
    }
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

/// One namespace as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNamespace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_bucket: Option<RawBucket>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dynamic_bucket_template: Option<RawBucket>,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    max_dynamic_buckets: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) buckets: Option<BTreeMap<String, RawBucket>>,
}

/// One bucket as written; 0 or absent means the default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBucket {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    size: i64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    fill_rate: f64,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    wait_timeout_millis: i64,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    max_idle_millis: i64,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    max_debt_millis: i64,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    max_tokens_per_request: i64,
}

/// Where a bucket sits, for error messages.
struct Place<'a> {
    namespace: Option<&'a str>,
    bucket: &'a str,
}

impl Place<'_> {
    fn error(&self, field: &'static str, problem: impl Into<String>) -> QuotaConfigError {
        QuotaConfigError::Invalid {
            namespace: self.namespace.map(str::to_owned),
            bucket: Some(self.bucket.to_owned()),
            field,
            problem: problem.into(),
        }
    }
}

/// The reference's zero-means-default rule for an integer field.
fn or_default(v: i64, default: i64) -> i64 {
    if v == 0 {
        default
    } else {
        v
    }
}

fn millis(place: &Place<'_>, field: &'static str, v: i64) -> Result<Duration, QuotaConfigError> {
    u64::try_from(v)
        .map(Duration::from_millis)
        .map_err(|_| place.error(field, format!("must not be negative, got {v}")))
}

impl RawBucket {
    fn validate(self, place: &Place<'_>) -> Result<BucketConfig, QuotaConfigError> {
        let size = or_default(self.size, 100);
        let size = u64::try_from(size)
            .ok()
            .filter(|&s| s <= tollgate::TokenBucket::MAX_OPS)
            .ok_or_else(|| {
                place.error(
                    "size",
                    format!(
                        "must be between 1 and {}, got {size}",
                        tollgate::TokenBucket::MAX_OPS
                    ),
                )
            })?;
        let fill_rate = if self.fill_rate == 0.0 {
            50.0
        } else {
            self.fill_rate
        };
        let rate = RateSpec::new(fill_rate).map_err(|_| {
            place.error(
                "fill_rate",
                format!(
                    "must be between {} and {} per second, got {fill_rate}",
                    RateSpec::MIN_OPS_PER_SEC,
                    RateSpec::MAX_OPS_PER_SEC
                ),
            )
        })?;
        let wait_timeout = millis(
            place,
            "wait_timeout_millis",
            or_default(self.wait_timeout_millis, 1000),
        )?;
        let max_idle = match or_default(self.max_idle_millis, -1) {
            v if v < 0 => None,
            v => Some(Duration::from_millis(v.unsigned_abs())),
        };
        let max_debt = millis(
            place,
            "max_debt_millis",
            or_default(self.max_debt_millis, 10_000),
        )?;
        let default_max_tokens = (fill_rate as i64).max(1);
        let max_tokens = or_default(self.max_tokens_per_request, default_max_tokens);
        let max_tokens_per_request = u64::try_from(max_tokens).map_err(|_| {
            place.error(
                "max_tokens_per_request",
                format!("must not be negative, got {max_tokens}"),
            )
        })?;
        Ok(BucketConfig {
            size,
            fill_rate,
            wait_timeout,
            max_idle,
            max_debt,
            max_tokens_per_request,
            rate,
        })
    }
}

fn name_error(namespace: Option<&str>, bucket: Option<&str>, e: NameError) -> QuotaConfigError {
    QuotaConfigError::Invalid {
        namespace: namespace.map(str::to_owned),
        bucket: bucket.map(str::to_owned),
        field: "name",
        problem: e.to_string(),
    }
}

fn reserved(namespace: Option<&str>, bucket: Option<&str>) -> QuotaConfigError {
    QuotaConfigError::Invalid {
        namespace: namespace.map(str::to_owned),
        bucket: bucket.map(str::to_owned),
        field: "name",
        problem: "reserved for the default buckets".into(),
    }
}

impl Document {
    /// Parses a configuration file's text without validating it.
    ///
    /// # Errors
    ///
    /// [`QuotaConfigError::Parse`] for malformed YAML or unknown keys.
    pub(crate) fn from_yaml(text: &str) -> Result<Document, QuotaConfigError> {
        if text.trim().is_empty() {
            return Ok(Document::default());
        }
        serde_norway::from_str(text).map_err(QuotaConfigError::Parse)
    }

    /// Validates the document.
    ///
    /// # Errors
    ///
    /// As [`QuotaConfig::from_yaml`].
    pub(crate) fn validate(&self) -> Result<QuotaConfig, QuotaConfigError> {
        let raw = self;
        let global_default_bucket = raw
            .global_default_bucket
            .clone()
            .map(|b| {
                b.validate(&Place {
                    namespace: None,
                    bucket: "global_default_bucket",
                })
            })
            .transpose()?;
        let mut namespaces = BTreeMap::new();
        for (ns_name, ns) in raw.namespaces.clone().unwrap_or_default() {
            check_name(&ns_name).map_err(|e| name_error(Some(&ns_name), None, e))?;
            if ns_name == GLOBAL_NAMESPACE {
                return Err(reserved(Some(&ns_name), None));
            }
            let invalid = |field: &'static str, problem: String| QuotaConfigError::Invalid {
                namespace: Some(ns_name.clone()),
                bucket: None,
                field,
                problem,
            };
            if let Some(name) = &ns.name {
                if name != &ns_name {
                    return Err(invalid(
                        "name",
                        format!("{name:?} differs from the namespace's key"),
                    ));
                }
            }
            if ns.default_bucket.is_some() && ns.dynamic_bucket_template.is_some() {
                return Err(invalid(
                    "default_bucket",
                    "a namespace may have a default bucket or a dynamic_bucket_template, not both"
                        .into(),
                ));
            }
            let max_dynamic_buckets = u64::try_from(ns.max_dynamic_buckets).map_err(|_| {
                invalid(
                    "max_dynamic_buckets",
                    format!("must not be negative, got {}", ns.max_dynamic_buckets),
                )
            })?;
            let place = |bucket| Place {
                namespace: Some(&ns_name),
                bucket,
            };
            let default_bucket = ns
                .default_bucket
                .map(|b| b.validate(&place("default_bucket")))
                .transpose()?;
            let dynamic_bucket_template = ns
                .dynamic_bucket_template
                .map(|b| b.validate(&place("dynamic_bucket_template")))
                .transpose()?;
            let mut buckets = BTreeMap::new();
            for (b_name, b) in ns.buckets.unwrap_or_default() {
                check_name(&b_name).map_err(|e| name_error(Some(&ns_name), Some(&b_name), e))?;
                if b_name == DEFAULT_BUCKET_NAME {
                    return Err(reserved(Some(&ns_name), Some(&b_name)));
                }
                let config = b.validate(&Place {
                    namespace: Some(&ns_name),
                    bucket: &b_name,
                })?;
                buckets.insert(b_name, config);
            }
            namespaces.insert(
                ns_name,
                NamespaceConfig {
                    default_bucket,
                    dynamic_bucket_template,
                    max_dynamic_buckets,
                    buckets,
                },
            );
        }
        let store = raw.store.as_ref().map(RawStore::validate).transpose()?;
        Ok(QuotaConfig {
            global_default_bucket,
            namespaces,
            store,
        })
    }
}

impl QuotaConfig {
    /// Parses and validates a configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_quota::QuotaConfig;
    ///
    /// let config = QuotaConfig::from_yaml(
    ///     "namespaces:\n  db:\n    buckets:\n      users: {fill_rate: 0.5, wait_timeout_millis: 20}\n",
    /// )?;
    /// let users = &config.namespaces["db"].buckets["users"];
    /// assert_eq!((users.size, users.fill_rate), (100, 0.5));
    /// assert_eq!(users.wait_timeout, Duration::from_millis(20));
    ///
    /// let err = QuotaConfig::from_yaml("namespaces:\n  db:\n    buckets:\n      users: {size: -3}\n")
    ///     .unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "namespace \"db\": bucket \"users\": size: must be between 1 and 8796093022207, got -3"
    /// );
    /// # Ok::<(), tollgate_quota::QuotaConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`QuotaConfigError::Parse`] for malformed YAML or unknown keys,
    /// [`QuotaConfigError::Invalid`] for values out of range, invalid names, or a
    /// namespace with both a default bucket and a dynamic template.
    pub fn from_yaml(text: &str) -> Result<QuotaConfig, QuotaConfigError> {
        Document::from_yaml(text)?.validate()
    }

    /// Where the file's `store:` section keeps the buckets in Redis, if it
    /// has one: `tollgate quota` uses it unless `--store` is given. A
    /// reload keeps the store the server started with.
    ///
    /// ```yaml
    /// store:
    ///   url: redis://redis.internal:6379   # rediss://, redis+sentinel://HOST:PORT/MASTER
    ///   # or, for a Redis Cluster, its seed nodes instead of `url`:
    ///   # cluster: [redis://10.0.0.1:6379, redis://10.0.0.2:6379]
    ///   # ca: /etc/redis/ca.pem          # the CA of rediss:// servers (default: the system's)
    ///   prefix: "tollgate:quota:"
    ///   pool_size: 2
    ///   deadline_millis: 10
    ///   connect_timeout_millis: 2000
    ///   on_error: local                    # allow | deny | local
    ///   replicas: 3
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_quota::{OnError, QuotaConfig};
    ///
    /// let config = QuotaConfig::from_yaml(
    ///     "store: {url: \"redis://127.0.0.1:6379\", on_error: deny}\nglobal_default_bucket: {}\n",
    /// )?;
    /// assert_eq!(config.store().map(|s| s.on_error_mode()), Some(OnError::Deny));
    /// let bad = QuotaConfig::from_yaml("store: {url: \"http://x\"}\n").unwrap_err();
    /// assert_eq!(
    ///     bad.to_string(),
    ///     "store.url: invalid redis store: cannot parse \"http://x\": the scheme is none of \
    ///      redis://, rediss://, redis+sentinel://"
    /// );
    /// # Ok::<(), tollgate_quota::QuotaConfigError>(())
    /// ```
    pub fn store(&self) -> Option<&QuotaStore> {
        self.store.as_ref()
    }

    /// Whether no request can find a bucket: no global default bucket and
    /// no namespace with a bucket, a default bucket or a template. Such a
    /// configuration answers every request `REJECTED_NO_BUCKET`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_quota::QuotaConfig;
    ///
    /// assert!(QuotaConfig::from_yaml("namespaces:\n  a: {}\n")?.has_no_buckets());
    /// assert!(!QuotaConfig::from_yaml("global_default_bucket: {}\n")?.has_no_buckets());
    /// # Ok::<(), tollgate_quota::QuotaConfigError>(())
    /// ```
    pub fn has_no_buckets(&self) -> bool {
        self.global_default_bucket.is_none()
            && self.namespaces.values().all(|ns| {
                ns.buckets.is_empty()
                    && ns.default_bucket.is_none()
                    && ns.dynamic_bucket_template.is_none()
            })
    }

    /// Reads, parses and validates a configuration file.
    ///
    /// # Errors
    ///
    /// [`QuotaConfigError::Read`] if the file cannot be read, else as
    /// [`QuotaConfig::from_yaml`].
    pub fn from_file(path: &Path) -> Result<QuotaConfig, QuotaConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| QuotaConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        QuotaConfig::from_yaml(&text)
    }
}

#[cfg(test)]
mod tests;
