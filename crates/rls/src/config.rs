//! The configuration: envoyproxy/ratelimit's YAML, one domain per document,
//! read from a file or a directory of them, validated into a tree of
//! descriptor nodes per domain.
//!
//! The format, as the reference reads it:
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address            # any value: a counter per address
//!     rate_limit: {unit: minute, requests_per_unit: 3}
//!   - key: remote_address
//!     value: 10.0.0.1                # this value: no limit at all
//!   - key: path
//!     value: /api/*                  # a wildcard; share_threshold: true
//!     rate_limit:                    # would make all paths share one
//!       unit: minute
//!       requests_per_unit: 2
//!   - key: tenant
//!     value: acme
//!     descriptors:                   # the request's next entry
//!       - key: user
//!         rate_limit: {unit: second, requests_per_unit: 10, name: acme_user}
//! ```
//!
//! Every key of the reference is accepted (`detailed_metric`,
//! `value_to_metric` and `metadata` are read and do not change answers).
//! Two additions of tollgate's own, each an error in the reference:
//! `rate_limit` may be a list of limits (several limits on one
//! descriptor, such as a burst and a sustained one), and a limit may name
//! its `algorithm` (`fixed_window`, the default and the reference's;
//! `token_bucket`, `gcra` or `sliding_window`).
//!
//! Every error is one line: the file, the line where the YAML reader found
//! it when it has one, the place in the document, and the reference's
//! message, e.g. `edge.yaml:3: descriptors[0]: invalid rate
//! limit unit 'minutes'`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Deserialize as _;

use super::counter::{Smooth, SmoothTable};
use super::metrics::RuleStats;
use super::raw::{RawDescriptor, RawRoot, OURS};
use super::Unit;

/// How a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// `requests_per_unit` per window aligned on the unit's boundaries,
    /// every hit counted (over-limit ones too): the reference's.
    #[default]
    FixedWindow,
    /// A token bucket of `requests_per_unit` tokens refilled over one unit.
    TokenBucket,
    /// GCRA at `requests_per_unit` per unit with a burst of as many.
    Gcra,
    /// A sliding window counter: the current window plus the previous one
    /// weighted by how much of it the sliding window still covers.
    SlidingWindow,
}

impl Algorithm {
    /// The algorithm a configuration names (`fixed_window`,
    /// `token_bucket`, `gcra`, `sliding_window`).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Some(match name {
            "fixed_window" => Algorithm::FixedWindow,
            "token_bucket" => Algorithm::TokenBucket,
            "gcra" => Algorithm::Gcra,
            "sliding_window" => Algorithm::SlidingWindow,
            _ => return None,
        })
    }

    /// Its name in a configuration.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}

/// One limit of the configuration (a `rate_limit` map), or a request's
/// override of it.
#[derive(Debug)]
pub struct ConfiguredLimit {
    /// `rate_limit.name`: returned in `current_limit.name`, the target of
    /// `replaces`; empty when unnamed.
    pub name: String,
    /// Requests per window; 0 refuses every request.
    pub requests_per_unit: u32,
    /// The window; `None` only when `unlimited`.
    pub unit: Option<Unit>,
    /// Never limited, never counted.
    pub unlimited: bool,
    /// Counted, but never answered OVER_LIMIT.
    pub shadow_mode: bool,
    /// Fails the request only when every quota descriptor of it fails.
    pub quota_mode: bool,
    /// Names of the limits this one knocks out of a request.
    pub replaces: Vec<String>,
    /// How it counts.
    pub algorithm: Algorithm,
    /// Where it sits: the domain and the path of keys and values, joined
    /// with `.` (`edge.tenant_acme.user`), for logs and metrics.
    pub path: String,
    /// The file it was loaded from (empty for an override).
    pub(crate) file: Arc<str>,
    /// Which of its descriptor's limits it is (0 for the first or only).
    pub(crate) slot: usize,
    /// The smooth algorithm's policy; `None` for a fixed window.
    pub(crate) smooth: Option<Smooth>,
    /// The smooth algorithm's keys, made on first use.
    pub(crate) table: SmoothTable,
    /// With a Redis store, the smooth policy at a replica's share of the
    /// limit, for when Redis fails (`on_error: local`); made on first use.
    pub(crate) local: OnceLock<Option<Smooth>>,
    /// Its metrics, resolved on first use.
    pub(crate) stats: OnceLock<RuleStats>,
}

impl ConfiguredLimit {
    /// A request's override in `domain`: `requests_per_unit` per `unit`,
    /// unnamed, a fixed window, counted in metrics as `<domain>.override`.
    pub(crate) fn adhoc(domain: &str, requests_per_unit: u32, unit: Unit) -> ConfiguredLimit {
        ConfiguredLimit {
            name: String::new(),
            requests_per_unit,
            unit: Some(unit),
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            replaces: Vec::new(),
            algorithm: Algorithm::FixedWindow,
            path: format!("{domain}.override"),
            file: Arc::from(""),
            slot: 0,
            smooth: None,
            table: SmoothTable::default(),
            local: OnceLock::new(),
            stats: OnceLock::new(),
        }
    }
}

impl ConfiguredLimit {
    /// The smooth policy at `limit` (a replica's share) per `unit`, for
    /// counting alone while Redis fails; the whole rule's where the share
    /// is too slow to count. `None` for a fixed window.
    pub(crate) fn local_smooth(&self, limit: u32, unit: Unit) -> Option<&Smooth> {
        let smooth = self.smooth.as_ref()?;
        self.local
            .get_or_init(|| Smooth::new(self.algorithm, limit, unit).ok().flatten())
            .as_ref()
            .or(Some(smooth))
    }
}

/// One node of a domain's descriptor tree.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// Children by composite key: `key_value`, or `key` when value-less.
    pub(crate) children: HashMap<String, Node>,
    /// Children whose composite key holds a `*`, in configuration order,
    /// with the key split on `*`.
    pub(crate) wildcards: Vec<(String, Vec<String>)>,
    /// The limits at this node (none: the node only leads deeper, or
    /// exempts what it matches).
    pub(crate) rules: Vec<Arc<ConfiguredLimit>>,
    /// With `share_threshold`: the pattern (the part after `key_`) that
    /// stands for every value it matches in counter keys.
    pub(crate) share: Option<String>,
}

/// The whole configuration: every domain's descriptor tree.
///
/// # Examples
///
/// ```
/// use tollgate_rls::RlsConfig;
///
/// let config = RlsConfig::from_yaml("edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")?;
/// assert_eq!(config.domains(), vec!["edge"]);
///
/// let error = RlsConfig::from_yaml("edge.yaml", "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: minutes}\n").unwrap_err();
/// assert_eq!(error.to_string(), "edge.yaml:3: descriptors[0]: invalid rate limit unit 'minutes'");
/// # Ok::<(), tollgate_rls::ConfigError>(())
/// ```
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub(crate) domains: HashMap<String, Node>,
}

/// Why a configuration was refused: one line naming the file, the line
/// when known, the place in the document and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: String,
    line: Option<usize>,
    message: String,
}

impl ConfigError {
    fn new(file: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: None,
            message: message.into(),
        }
    }

    /// The file the error is in.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line (from 1) where it was found, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The reason, with its place in the document.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn from_yaml(file: &str, error: &serde_norway::Error) -> ConfigError {
        let mut text = error.to_string();
        let line = error.location().map(|l| {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            if text.ends_with(&suffix) {
                text.truncate(text.len() - suffix.len());
            }
            l.line()
        });
        let message = if text.contains(OURS) {
            text.replace(OURS, "")
        } else {
            format!("error loading config file: {text}")
        };
        // One line, whatever the YAML reader says.
        let message = message.replace('\n', " ");
        ConfigError {
            file: file.to_owned(),
            line,
            message,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl RlsConfig {
    /// One document, `name` naming it in errors.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: the reference's load errors, one line each.
    pub fn from_yaml(name: &str, text: &str) -> Result<RlsConfig, ConfigError> {
        RlsConfig::from_documents([(name, text)], false)
    }

    /// Several documents, each `(name, text)`, loaded in order. With
    /// `merge`, documents naming the same domain add to it (the
    /// reference's `MERGE_DOMAIN_CONFIG`); without, a second one is an
    /// error.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for the first document that does not load.
    pub fn from_documents<'a>(
        documents: impl IntoIterator<Item = (&'a str, &'a str)>,
        merge: bool,
    ) -> Result<RlsConfig, ConfigError> {
        let mut config = RlsConfig::default();
        for (name, text) in documents {
            config.load_document(name, text, merge)?;
        }
        Ok(config)
    }

    /// The file at `path`, or every file under the directory at `path`
    /// (in name order, dot files and directories skipped); see
    /// [`from_documents`](Self::from_documents) for `merge`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming a file that cannot be read or does not load.
    pub fn load(path: &Path, merge: bool) -> Result<RlsConfig, ConfigError> {
        let files = config_files(path)?;
        let mut texts = Vec::with_capacity(files.len());
        for file in &files {
            let text = std::fs::read_to_string(file).map_err(|e| {
                ConfigError::new(&file.display().to_string(), format!("cannot be read: {e}"))
            })?;
            texts.push((file.display().to_string(), text));
        }
        RlsConfig::from_documents(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())), merge)
    }

    /// The domains, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        domains.sort_unstable();
        domains
    }

    /// Every limit of `domain`, in no particular order.
    pub fn rules(&self, domain: &str) -> Vec<Arc<ConfiguredLimit>> {
        fn walk(node: &Node, out: &mut Vec<Arc<ConfiguredLimit>>) {
            out.extend(node.rules.iter().cloned());
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        if let Some(root) = self.domains.get(domain) {
            walk(root, &mut out);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path).then(a.slot.cmp(&b.slot)));
        out
    }

    /// Whether every limit can be counted in a Redis store
    /// ([`RateLimitService::with_store`](super::RateLimitService::with_store)):
    /// fixed windows, GCRA and sliding windows can; a token bucket cannot
    /// (the store's script has no exact token bucket).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_rls::RlsConfig;
    ///
    /// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}\n";
    /// let error = RlsConfig::from_yaml("edge.yaml", yaml)?.check_store().unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "edge.yaml: edge.user: algorithm token_bucket cannot be counted in a Redis store: use fixed_window, gcra or sliding_window"
    /// );
    /// # Ok::<(), tollgate_rls::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and the key of the first such limit
    /// (in domain and path order).
    pub fn check_store(&self) -> Result<(), ConfigError> {
        for domain in self.domains() {
            for rule in self.rules(domain) {
                if rule.algorithm == Algorithm::TokenBucket && !rule.unlimited {
                    return Err(ConfigError::new(
                        &rule.file,
                        format!(
                            "{}: algorithm token_bucket cannot be counted in a Redis store: \
                             use fixed_window, gcra or sliding_window",
                            rule.path
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn load_document(&mut self, name: &str, text: &str, merge: bool) -> Result<(), ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let root = RawRoot::deserialize(de).map_err(|e| ConfigError::from_yaml(name, &e))?;
        if root.domain.is_empty() {
            return Err(ConfigError::new(
                name,
                "config file cannot have empty domain",
            ));
        }
        let parent = format!("{}.", root.domain);
        match self.domains.get_mut(&root.domain) {
            Some(node) if merge => add_children(node, name, &parent, &root.descriptors),
            Some(_) => Err(ConfigError::new(
                name,
                format!("duplicate domain '{}' in config file", root.domain),
            )),
            None => {
                let mut node = Node::default();
                add_children(&mut node, name, &parent, &root.descriptors)?;
                self.domains.insert(root.domain, node);
                Ok(())
            }
        }
    }
}

/// Adds `descriptors` under `node`, whose path is `parent` (ending in `.`).
fn add_children(
    node: &mut Node,
    file: &str,
    parent: &str,
    descriptors: &[RawDescriptor],
) -> Result<(), ConfigError> {
    for raw in descriptors {
        let composite = raw.composite();
        let path = format!("{parent}{composite}");
        if node.children.contains_key(&composite) {
            return Err(ConfigError::new(
                file,
                format!("duplicate descriptor composite key '{path}'"),
            ));
        }
        let mut child = Node::default();
        for (slot, limit) in raw.rate_limits.iter().enumerate() {
            let unit = if limit.unlimited {
                None
            } else {
                Unit::from_name(&limit.unit)
            };
            let smooth = match unit {
                Some(unit) => Smooth::new(limit.algorithm, limit.requests_per_unit, unit)
                    .map_err(|e| ConfigError::new(file, format!("{path}: {e}")))?,
                None => None,
            };
            child.rules.push(Arc::new(ConfiguredLimit {
                name: limit.name.clone(),
                requests_per_unit: limit.requests_per_unit,
                unit,
                unlimited: limit.unlimited,
                shadow_mode: raw.shadow_mode,
                quota_mode: raw.quota_mode,
                replaces: limit.replaces.clone(),
                algorithm: limit.algorithm,
                path: path.clone(),
                file: Arc::from(file),
                slot,
                smooth,
                table: SmoothTable::default(),
                local: OnceLock::new(),
                stats: OnceLock::new(),
            }));
        }
        if raw.share_threshold {
            child.share = Some(
                composite
                    .strip_prefix(&format!("{}_", raw.key))
                    .unwrap_or(&composite)
                    .to_owned(),
            );
        }
        add_children(&mut child, file, &format!("{path}."), &raw.descriptors)?;
        if composite.contains('*') {
            let parts = composite.split('*').map(str::to_owned).collect();
            node.wildcards.push((composite.clone(), parts));
        }
        node.children.insert(composite, child);
    }
    Ok(())
}

/// The files a `--config` path names: itself, or the regular files under
/// it (recursively, in name order, dot files skipped: the files the
/// reload watches, [`tollgate_service::files_under`]).
pub(crate) fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    tollgate_service::files_under(path).map_err(|(unread, e)| {
        ConfigError::new(
            &unread.display().to_string(),
            format!("cannot be read: {e}"),
        )
    })
}
