//! The server's resource configuration: YAML in Doorman's format; see
//! [`ServerConfig`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::algorithm::{AlgorithmConfig, Kind};
use super::glob::Glob;

/// The configuration `tollgate serve` uses when given none: every resource
/// shares 1000 units of capacity by FAIR_SHARE.
pub(super) const DEFAULT_YAML: &str = "\
resources:
  - identifier_glob: \"*\"
    capacity: 1000
    description: default catch-all (built in)
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 15}
";

/// The longest lease length and learning-mode duration accepted: one day.
pub(super) const MAX_LEASE_LENGTH: Duration = Duration::from_secs(86_400);

/// The largest capacity (and safe capacity) accepted.
pub(super) const MAX_CAPACITY: f64 = 1e15;

/// A validated resource configuration: YAML in Doorman's format.
///
/// The file mirrors the `ResourceRepository` message: its keys are the proto
/// field names and enums are written by name, so a configuration written for
/// the Go server loads unchanged:
///
/// ```yaml
/// resources:
///   - identifier_glob: fair
///     capacity: 1000
///     safe_capacity: 10
///     description: fair share example
///     algorithm: {kind: FAIR_SHARE, lease_length: 15, refresh_interval: 5}
///   - identifier_glob: "*"
///     capacity: 1000
///     algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 15}
/// ```
///
/// [`ServerConfig::from_yaml`] parses and validates; every error names the template
/// (its index and glob) and the field at fault.
///
/// # Bounds
///
/// | field | accepted | why |
/// |---|---|---|
/// | `capacity`, `safe_capacity` | finite, `0 ..= 1e15` | sums of grants stay exact to the unit (below 2^53) and never overflow |
/// | `algorithm.refresh_interval` | `1 ..= lease_length` s | a client must be able to renew before its lease lapses |
/// | `algorithm.lease_length` | `1 ..= 86400` s | a lease is what ends a client's use when the server is gone; one that outlives a day never does |
/// | `algorithm.learning_mode_duration` | `..= 86400` s; `<= 0` disables | learning mode is as long as the longest lease an earlier master may have granted, no more |
///
/// Go's server accepted any value; a lease length of `i64::MAX` seconds there
/// grants leases that never expire.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    templates: Vec<Arc<Template>>,
}

/// How the server treats the resources whose ids match one glob.
#[derive(Debug, Clone)]
pub struct Template {
    /// The glob, as written in `identifier_glob`.
    pub glob: Glob,
    /// The capacity shared among the resource's clients.
    pub capacity: f64,
    /// What a client may use when it cannot reach the server, if configured.
    pub safe_capacity: Option<f64>,
    /// Free text.
    pub description: Option<String>,
    /// The algorithm and its lease timings.
    pub algorithm: AlgorithmConfig,
}

impl Template {
    /// How long a resource stays in learning mode after the server wins
    /// mastership: `learning_mode_duration` when set (zero or less disables
    /// learning mode), else the lease length.
    pub fn learning_mode(&self) -> Duration {
        self.algorithm
            .learning_mode_duration
            .unwrap_or(self.algorithm.lease_length)
    }
}

/// Why a configuration was rejected.
#[derive(Debug)]
pub enum ServerConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not YAML of the expected shape.
    Parse(serde_norway::Error),
    /// A template is invalid.
    Template {
        /// Its position in `resources`, from 0.
        index: usize,
        /// Its `identifier_glob`, as written.
        glob: String,
        /// The field at fault, e.g. `algorithm.lease_length`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The configuration as a whole is invalid (e.g. no `"*"` template).
    Repository(String),
}

impl fmt::Display for ServerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerConfigError::Read { path, .. } => write!(f, "cannot read {}", path.display()),
            ServerConfigError::Parse(e) => write!(f, "invalid configuration: {e}"),
            ServerConfigError::Template {
                index,
                glob,
                field,
                reason,
            } => write!(f, "resources[{index}] ({glob:?}): {field}: {reason}"),
            ServerConfigError::Repository(reason) => write!(f, "invalid configuration: {reason}"),
        }
    }
}

impl std::error::Error for ServerConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServerConfigError::Read { source, .. } => Some(source),
            // The parser's message is already in this error's own.
            _ => None,
        }
    }
}

// The YAML shape. Required proto fields are `Option` here so that a missing
// one is reported with the template's index and glob, not only a line number.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepository {
    #[serde(default)]
    resources: Vec<RawTemplate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    identifier_glob: Option<String>,
    capacity: Option<f64>,
    algorithm: Option<RawAlgorithm>,
    safe_capacity: Option<f64>,
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlgorithm {
    kind: Option<RawKind>,
    lease_length: Option<i64>,
    refresh_interval: Option<i64>,
    #[serde(default)]
    parameters: Vec<RawParameter>,
    learning_mode_duration: Option<i64>,
}

#[derive(Deserialize, Clone, Copy)]
#[allow(clippy::enum_variant_names)]
enum RawKind {
    #[serde(rename = "NO_ALGORITHM")]
    NoAlgorithm,
    #[serde(rename = "STATIC")]
    Static,
    #[serde(rename = "PROPORTIONAL_SHARE")]
    ProportionalShare,
    #[serde(rename = "FAIR_SHARE")]
    FairShare,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParameter {
    name: String,
    value: Option<String>,
}

impl ServerConfig {
    /// The built-in default, what `tollgate serve` uses when given none:
    /// every resource shares 1000 units of capacity by FAIR_SHARE.
    pub fn builtin() -> Self {
        ServerConfig::from_yaml(DEFAULT_YAML).expect("the built-in configuration is valid")
    }

    /// Reads and validates a configuration file.
    ///
    /// # Errors
    ///
    /// As [`ServerConfig::from_yaml`], plus [`ServerConfigError::Read`].
    pub fn from_file(path: &Path) -> Result<Self, ServerConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServerConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ServerConfig::from_yaml(&text)
    }

    /// Parses and validates a configuration.
    ///
    /// # Errors
    ///
    /// [`ServerConfigError::Parse`] for malformed YAML or unknown keys;
    /// [`ServerConfigError::Template`] for a missing required field, a malformed
    /// glob, a capacity or safe capacity outside `0..=1e15`,
    /// `refresh_interval < 1`, `lease_length` outside
    /// `refresh_interval..=86400` s, or a `learning_mode_duration` above
    /// 86400 s;
    /// [`ServerConfigError::Repository`] when the `"*"` template is missing or not
    /// last.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::ServerConfig;
    ///
    /// let err = ServerConfig::from_yaml("resources: [{identifier_glob: x, capacity: 1}]").unwrap_err();
    /// assert_eq!(err.to_string(), "resources[0] (\"x\"): algorithm: missing");
    /// ```
    pub fn from_yaml(text: &str) -> Result<Self, ServerConfigError> {
        let raw: RawRepository = serde_norway::from_str(text).map_err(ServerConfigError::Parse)?;
        let mut templates = Vec::with_capacity(raw.resources.len());
        for (index, t) in raw.resources.into_iter().enumerate() {
            templates.push(Arc::new(validate_template(index, t)?));
        }
        match templates.iter().position(|t| t.glob.as_str() == "*") {
            None => Err(ServerConfigError::Repository(
                "no catch-all template: add one with identifier_glob \"*\" as the last entry"
                    .into(),
            )),
            Some(i) if i + 1 != templates.len() => Err(ServerConfigError::Repository(format!(
                "the catch-all \"*\" template is resources[{i}] but must be the last entry"
            ))),
            Some(_) => Ok(ServerConfig { templates }),
        }
    }

    /// The templates, in configuration order.
    pub fn templates(&self) -> &[Arc<Template>] {
        &self.templates
    }

    /// The longest learning mode of any template: zero when every
    /// template turns learning mode off.
    pub(crate) fn longest_learning_mode(&self) -> Duration {
        self.templates
            .iter()
            .map(|t| t.learning_mode())
            .max()
            .unwrap_or_default()
    }

    /// The longest lease of any template: zero without templates.
    pub fn longest_lease_length(&self) -> Duration {
        self.templates
            .iter()
            .map(|t| t.algorithm.lease_length)
            .max()
            .unwrap_or_default()
    }

    /// The template for resource `id`: one whose glob is exactly `id` first,
    /// else the first glob that matches, in order, else the catch-all.
    ///
    /// The catch-all template, `identifier_glob: "*"`, matches every id,
    /// ids with `/` included: users write `*` meaning "everything else".
    /// Every other glob keeps Go's `path.Match` rules, where `*` stops at
    /// `/` (so `svc-*` does not match `svc-a/get`, which falls through to
    /// the catch-all). Go's server panics on an id with `/` under `*`.
    /// A validated configuration always has a catch-all, so this returns
    /// `None` only for a configuration built without one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::ServerConfig;
    ///
    /// let config = ServerConfig::from_yaml(
    ///     "resources:\n\
    ///      - {identifier_glob: 'svc-*', capacity: 5, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}\n\
    ///      - {identifier_glob: '*', capacity: 9, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}\n",
    /// )?;
    /// assert_eq!(config.find("svc-a").unwrap().capacity, 5.0);
    /// assert_eq!(config.find("svc-a/get").unwrap().capacity, 9.0);
    /// assert_eq!(config.find("a/b/c").unwrap().capacity, 9.0);
    /// # Ok::<(), tollgate_doorman::ServerConfigError>(())
    /// ```
    pub fn find(&self, id: &str) -> Option<&Arc<Template>> {
        self.templates
            .iter()
            .find(|t| t.glob.as_str() == id)
            .or_else(|| self.templates.iter().find(|t| t.glob.matches(id)))
            .or_else(|| self.templates.iter().find(|t| t.glob.as_str() == "*"))
    }
}

/// `x` for a message: huge values in exponent form.
fn num(x: f64) -> String {
    if x.abs() >= 1e16 {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn validate_template(index: usize, t: RawTemplate) -> Result<Template, ServerConfigError> {
    let glob_text = t.identifier_glob.clone().unwrap_or_default();
    let err = |field: &'static str, reason: String| ServerConfigError::Template {
        index,
        glob: glob_text.clone(),
        field,
        reason,
    };
    let missing = |field| err(field, "missing".into());

    let pattern = t
        .identifier_glob
        .as_deref()
        .ok_or_else(|| missing("identifier_glob"))?;
    let glob = Glob::new(pattern).map_err(|e| err("identifier_glob", e.to_string()))?;
    let capacity = t.capacity.ok_or_else(|| missing("capacity"))?;
    if !(capacity.is_finite() && (0.0..=MAX_CAPACITY).contains(&capacity)) {
        return Err(err(
            "capacity",
            format!(
                "{} is not a finite number in 0..={MAX_CAPACITY:e}",
                num(capacity)
            ),
        ));
    }
    if let Some(safe) = t.safe_capacity {
        if !(safe.is_finite() && (0.0..=MAX_CAPACITY).contains(&safe)) {
            return Err(err(
                "safe_capacity",
                format!(
                    "{} is not a finite number in 0..={MAX_CAPACITY:e}",
                    num(safe)
                ),
            ));
        }
    }
    let a = t.algorithm.ok_or_else(|| missing("algorithm"))?;
    let kind = a.kind.ok_or_else(|| missing("algorithm.kind"))?;
    let lease = a
        .lease_length
        .ok_or_else(|| missing("algorithm.lease_length"))?;
    let refresh = a
        .refresh_interval
        .ok_or_else(|| missing("algorithm.refresh_interval"))?;
    if refresh < 1 {
        return Err(err(
            "algorithm.refresh_interval",
            format!("{refresh} is less than 1 second"),
        ));
    }
    if lease < 1 {
        return Err(err(
            "algorithm.lease_length",
            format!("{lease} is less than 1 second"),
        ));
    }
    let max_lease = MAX_LEASE_LENGTH.as_secs() as i64;
    if lease > max_lease {
        return Err(err(
            "algorithm.lease_length",
            format!("{lease} is more than {max_lease} seconds (one day)"),
        ));
    }
    if lease < refresh {
        return Err(err(
            "algorithm.lease_length",
            format!("{lease} is shorter than refresh_interval {refresh}"),
        ));
    }
    if let Some(learning) = a.learning_mode_duration {
        if learning > max_lease {
            return Err(err(
                "algorithm.learning_mode_duration",
                format!("{learning} is more than {max_lease} seconds (one day)"),
            ));
        }
    }
    let secs = |s: i64| Duration::from_secs(s.max(0).unsigned_abs());
    Ok(Template {
        glob,
        capacity,
        safe_capacity: t.safe_capacity,
        description: t.description,
        algorithm: AlgorithmConfig {
            kind: match kind {
                RawKind::NoAlgorithm => Kind::NoAlgorithm,
                RawKind::Static => Kind::Static,
                RawKind::ProportionalShare => Kind::ProportionalShare,
                RawKind::FairShare => Kind::FairShare,
            },
            lease_length: secs(lease),
            refresh_interval: secs(refresh),
            // Absent: learning lasts one lease; zero or less: disabled.
            learning_mode_duration: a.learning_mode_duration.map(secs),
            parameters: a
                .parameters
                .into_iter()
                .map(|p| (p.name, p.value))
                .collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example from the Doorman repository, as quoted in the protocol spec.
    const SPEC_EXAMPLE: &str = r#"
resources:
  - identifier_glob: proportional
    capacity: 100
    safe_capacity: 10
    description: proportional example
    algorithm: {kind: PROPORTIONAL_SHARE, lease_length: 15, refresh_interval: 5}
  - identifier_glob: fair
    capacity: 1000
    safe_capacity: 10
    description: fair share example
    algorithm: {kind: FAIR_SHARE, lease_length: 15, refresh_interval: 5}
  - identifier_glob: "*"
    capacity: 1000
    safe_capacity: 10
    description: default
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 15}
"#;

    #[test]
    fn spec_example_loads() {
        let c = ServerConfig::from_yaml(SPEC_EXAMPLE).unwrap();
        assert_eq!(c.templates().len(), 3);
        let p = c.find("proportional").unwrap();
        assert_eq!(p.algorithm.kind, Kind::ProportionalShare);
        assert_eq!(p.capacity, 100.0);
        assert_eq!(p.safe_capacity, Some(10.0));
        assert_eq!(p.algorithm.lease_length, Duration::from_secs(15));
        assert_eq!(p.algorithm.refresh_interval, Duration::from_secs(5));
        assert_eq!(p.learning_mode(), Duration::from_secs(15));
        assert_eq!(c.find("fair").unwrap().algorithm.kind, Kind::FairShare);
        assert_eq!(c.find("other").unwrap().glob.as_str(), "*");
        assert_eq!(c.find("a/b").unwrap().glob.as_str(), "*");
    }

    #[test]
    fn builtin_is_a_fair_share_catch_all() {
        let c = ServerConfig::builtin();
        assert_eq!(c.templates().len(), 1);
        assert_eq!(c.find("anything").unwrap().algorithm.kind, Kind::FairShare);
    }

    #[test]
    fn exact_match_beats_an_earlier_glob() {
        let c = ServerConfig::from_yaml(
            r#"
resources:
  - {identifier_glob: "db-*", capacity: 1, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}
  - {identifier_glob: "db-main", capacity: 2, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}
  - {identifier_glob: "*", capacity: 3, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}
"#,
        )
        .unwrap();
        assert_eq!(c.find("db-main").unwrap().capacity, 2.0);
        assert_eq!(c.find("db-x").unwrap().capacity, 1.0);
        assert_eq!(c.find("x").unwrap().capacity, 3.0);
    }

    #[test]
    fn learning_mode_duration_zero_disables() {
        let c = ServerConfig::from_yaml(
            "resources: [{identifier_glob: '*', capacity: 1, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5, learning_mode_duration: -3}}]",
        )
        .unwrap();
        assert_eq!(c.templates()[0].learning_mode(), Duration::ZERO);
    }

    #[test]
    fn unbounded_values_are_refused() {
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 9223372036854775807, refresh_interval: 5}}"),
            "resources[0] (\"a\"): algorithm.lease_length: 9223372036854775807 is more than 86400 seconds (one day)"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 9223372036854775807}}"),
            "resources[0] (\"a\"): algorithm.lease_length: 60 is shorter than refresh_interval 9223372036854775807"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1e300, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5}}"),
            "resources[0] (\"a\"): capacity: 1e300 is not a finite number in 0..=1e15"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, safe_capacity: 1e16, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5}}"),
            "resources[0] (\"a\"): safe_capacity: 1e16 is not a finite number in 0..=1e15"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 86401}}"),
            "resources[0] (\"a\"): algorithm.learning_mode_duration: 86401 is more than 86400 seconds (one day)"
        );
        // The bounds themselves are accepted.
        ServerConfig::from_yaml("resources: [{identifier_glob: '*', capacity: 1e15, algorithm: {kind: STATIC, lease_length: 86400, refresh_interval: 86400, learning_mode_duration: 86400}}]").unwrap();
    }

    fn error(yaml_template: &str) -> String {
        let yaml = format!(
            "resources:\n  - {yaml_template}\n  - {{identifier_glob: '*', capacity: 1, algorithm: {{kind: STATIC, lease_length: 5, refresh_interval: 5}}}}\n"
        );
        ServerConfig::from_yaml(&yaml).unwrap_err().to_string()
    }

    #[test]
    fn template_errors_name_index_glob_and_field() {
        let algo = "algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5}";
        assert_eq!(
            error(&format!("{{identifier_glob: 'a[', capacity: 1, {algo}}}")),
            "resources[0] (\"a[\"): identifier_glob: malformed glob: unclosed character class"
        );
        assert_eq!(
            error(&format!("{{identifier_glob: a, {algo}}}")),
            "resources[0] (\"a\"): capacity: missing"
        );
        assert_eq!(
            error(&format!("{{identifier_glob: a, capacity: -1, {algo}}}")),
            "resources[0] (\"a\"): capacity: -1 is not a finite number in 0..=1e15"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 0}}"),
            "resources[0] (\"a\"): algorithm.refresh_interval: 0 is less than 1 second"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 0, refresh_interval: 1}}"),
            "resources[0] (\"a\"): algorithm.lease_length: 0 is less than 1 second"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 4, refresh_interval: 5}}"),
            "resources[0] (\"a\"): algorithm.lease_length: 4 is shorter than refresh_interval 5"
        );
        assert_eq!(
            error("{identifier_glob: a, capacity: 1, algorithm: {lease_length: 4, refresh_interval: 5}}"),
            "resources[0] (\"a\"): algorithm.kind: missing"
        );
        assert!(error("{identifier_glob: a, capacity: 1, algorithm: {kind: BOGUS, lease_length: 4, refresh_interval: 5}}")
            .contains("BOGUS"));
    }

    #[test]
    fn catch_all_must_exist_and_be_last() {
        let t = |g: &str| {
            format!("  - {{identifier_glob: '{g}', capacity: 1, algorithm: {{kind: STATIC, lease_length: 5, refresh_interval: 5}}}}\n")
        };
        let missing = ServerConfig::from_yaml(&format!("resources:\n{}", t("a"))).unwrap_err();
        assert!(missing.to_string().contains("no catch-all"), "{missing}");
        let early =
            ServerConfig::from_yaml(&format!("resources:\n{}{}", t("*"), t("a"))).unwrap_err();
        assert!(early.to_string().contains("must be the last"), "{early}");
        assert!(ServerConfig::from_yaml("resources: []").is_err());
        assert!(ServerConfig::from_yaml("").is_err());
    }
}
