//! Throttle rules from YAML (the format is documented on
//! [`rules_from_yaml`]), and hot reload of a rules file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tollgate_service::{hangup, reload_file, watch_file, Reload};

use super::error::{RulesError, ValueError};
use super::policy::{FixedWindow, Gcra, SlidingLog, SlidingWindowCounter, TokenPool};
use super::rules::{Extract, Limit, MissingKey, Mode, Rule};
use super::shared::{OnError, RedisStore, RedisStoreBuilder, StoreError};
use super::throttler::Throttler;
use super::trust::Trust;
use tollgate::RateSpec;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<RuleConfig>,
    #[serde(default)]
    store: Option<StoreConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreConfig {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    cluster: Vec<String>,
    #[serde(default)]
    ca: Option<std::path::PathBuf>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    pool_size: Option<usize>,
    #[serde(default)]
    deadline: Option<String>,
    #[serde(default)]
    connect_timeout: Option<String>,
    #[serde(default)]
    on_error: Option<String>,
    #[serde(default)]
    replicas: Option<u32>,
    #[serde(default)]
    over_limit_cache: Option<usize>,
}

impl StoreConfig {
    fn builder(self) -> Result<RedisStoreBuilder, RulesError> {
        let bad = |e| RulesError::new("store", e);
        let time = |field: &str, text: &str| {
            humantime::parse_duration(text)
                .map_err(|e| RulesError::new(format!("store: {field} \"{text}\""), e))
        };
        let mut b = match (self.url, self.cluster.is_empty()) {
            (Some(url), true) => {
                RedisStore::check_url(&url).map_err(bad)?;
                RedisStore::builder(url)
            }
            (None, false) => RedisStore::builder(String::new()).cluster(self.cluster),
            _ => {
                return Err(bad(StoreError::Config(
                    ("give either a url or a cluster seed list").into(),
                )))
            }
        };
        if let Some(ca) = self.ca {
            b = b.ca(ca);
        }
        if let Some(p) = self.prefix {
            b = b.prefix(p);
        }
        if let Some(n) = self.pool_size {
            b = b.pool_size(n);
        }
        if let Some(d) = self.deadline {
            b = b.deadline(time("deadline", &d)?);
        }
        if let Some(d) = self.connect_timeout {
            b = b.connect_timeout(time("connect_timeout", &d)?);
        }
        if let Some(m) = self.on_error {
            b = b.on_error(m.parse::<OnError>().map_err(|e| bad(e.into()))?);
        }
        if let Some(r) = self.replicas {
            b = b.replicas(r);
        }
        if let Some(n) = self.over_limit_cache {
            b = b.over_limit_cache(n);
        }
        Ok(b)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    name: String,
    key: KeyConfig,
    limit: LimitConfig,
    #[serde(default)]
    soft: Option<LimitConfig>,
    #[serde(default)]
    ban: Option<String>,
    #[serde(default)]
    shadow: bool,
    #[serde(default)]
    max_keys: Option<usize>,
    #[serde(default)]
    missing_key: Option<MissingKeyConfig>,
    #[serde(default)]
    headers: bool,
    #[serde(default)]
    slice: Option<u64>,
    #[serde(default)]
    slice_expiry: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum MissingKeyConfig {
    Shared,
    Reject,
    Skip,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientIpConfig {
    #[serde(default)]
    trusted_proxies: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeyConfig {
    Header(String),
    GrpcMetadata(String),
    PeerIp,
    ClientIp(ClientIpConfig),
    UserId,
    Global,
    MethodPath,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum LimitConfig {
    TokenPool {
        rate: String,
        #[serde(default)]
        burst: Option<u64>,
        #[serde(default)]
        backlog: Option<String>,
    },
    Gcra {
        rate: String,
        burst: u64,
        #[serde(default)]
        queue: u64,
    },
    FixedWindow {
        limit: u64,
        window: String,
    },
    SlidingLog {
        limit: u64,
        window: String,
        #[serde(default)]
        log_rejected: bool,
    },
    SlidingWindowCounter {
        limit: u64,
        window: String,
    },
}

fn duration(rule: &str, field: &str, text: &str) -> Result<Duration, RulesError> {
    humantime::parse_duration(text)
        .map_err(|e| RulesError::new(format!("rule \"{rule}\": {field} \"{text}\""), e))
}

fn rate(rule: &str, text: &str) -> Result<RateSpec, RulesError> {
    // The spec's error quotes the text.
    text.parse::<RateSpec>()
        .map_err(|e| RulesError::new(format!("rule \"{rule}\""), e))
}

impl LimitConfig {
    fn build(self, rule: &str) -> Result<Limit, RulesError> {
        let bad = |e| RulesError::new(format!("rule \"{rule}\""), e);
        Ok(match self {
            LimitConfig::TokenPool {
                rate: r,
                burst,
                backlog,
            } => {
                let mut pool = TokenPool::new(rate(rule, &r)?);
                if let Some(b) = backlog {
                    if burst.is_some() {
                        return Err(bad(ValueError::limit(
                            "a token pool with a burst keeps no backlog",
                        )));
                    }
                    pool = pool.with_backlog_cap(duration(rule, "backlog", &b)?);
                }
                if let Some(b) = burst {
                    if r.contains(',') {
                        return Err(bad(ValueError::limit(
                            "a token pool takes a burst ratio (\"5,2\") or a burst, not both",
                        )));
                    }
                    pool = pool.with_burst(b).map_err(bad)?;
                }
                Limit::TokenPool(pool)
            }
            LimitConfig::Gcra {
                rate: r,
                burst,
                queue,
            } => Limit::Gcra(Gcra::new(rate(rule, &r)?, burst, queue).map_err(bad)?),
            LimitConfig::FixedWindow { limit, window } => Limit::FixedWindow(
                FixedWindow::new(limit, duration(rule, "window", &window)?).map_err(bad)?,
            ),
            LimitConfig::SlidingLog {
                limit,
                window,
                log_rejected,
            } => Limit::SlidingLog(
                SlidingLog::new(limit, duration(rule, "window", &window)?)
                    .map_err(bad)?
                    .log_rejected(log_rejected),
            ),
            LimitConfig::SlidingWindowCounter { limit, window } => Limit::SlidingWindowCounter(
                SlidingWindowCounter::new(limit, duration(rule, "window", &window)?)
                    .map_err(bad)?,
            ),
        })
    }
}

/// Parses throttle rules from YAML.
///
/// # The format
///
/// A document holds `rules`, a list applied in order. Each rule has:
///
/// | field | meaning |
/// |---|---|
/// | `name` | the rule's name, in metrics, rejections and headers |
/// | `key` | what a request is counted under (below) |
/// | `limit` | the hard limit per key (below): above it, rejected |
/// | `soft` | optional: a lower limit above which requests are admitted with a warning |
/// | `ban` | optional: a rejected key is refused for this long past the limit |
/// | `shadow` | `true`: only count, never reject (default `false`) |
/// | `max_keys` | keys kept per limit (default 100000) |
/// | `missing_key` | a request without a usable key: `shared` (one bucket for all such requests, the default), `reject` (HTTP 400, an empty header value too) or `skip` (not limited by this rule; an empty header value is the key "", limited) |
/// | `headers` | `true`: the rule's `RateLimit-Policy` and `RateLimit` fields on responses (default `false`) |
/// | `slice` | with a `store`: tokens of a key each replica takes per Redis call and spends itself (default 0, none; fixed and sliding window counters, see [`Rule::slice`]) |
/// | `slice_expiry` | how long a replica spends a slice before returning what is left (default `100ms`, never past the window) |
///
/// Keys: `{ header: NAME }`, `{ grpc_metadata: NAME }`, `peer_ip`,
/// `{ client_ip: { trusted_proxies: [CIDR, ...] } }` (the address a
/// trusted proxy forwards, see [`Extract::client_ip`]), `user_id`,
/// `global`, `method_path`.
///
/// Limits:
///
/// - `{ token_pool: { rate: "5,2", backlog: 1s } }`: the core's pool, at
///   the limiter's rate grammar (`"5,2"` is 5/s with burst ratio 2);
///   `backlog` caps catching up (default 1 s); or
///   `{ token_pool: { rate: "5", burst: 10 } }`: a plain bucket of 10 ops
///   refilled at 5/s (see [`TokenPool`] for what each admits);
/// - `{ gcra: { rate: "10", burst: 2, queue: 20 } }`: a leaky bucket that
///   admits `burst` at once and delays up to `queue` more;
/// - `{ fixed_window: { limit: 1000, window: 1h } }`;
/// - `{ sliding_log: { limit: 20, window: 10s, log_rejected: true } }`;
/// - `{ sliding_window_counter: { limit: 3, window: 1s } }`.
///
/// An optional `store:` keeps the rules' keyed state in Redis, shared
/// by replicas (see [`store_from_yaml`]).
///
/// Durations use humantime (`1s`, `10m`, `1h 30m`). Unknown fields are
/// errors. Only the rules reload ([`spawn_rules_reload`]); the cost model,
/// criticality and queue are fixed when the throttler is built.
///
/// # Examples
///
/// ```
/// let rules = tollgate_throttle::rules_from_yaml(r#"
/// rules:
///   - name: per-api-key
///     key: { header: x-api-key }
///     limit: { token_pool: { rate: "5", burst: 10 } }
///     soft: { sliding_window_counter: { limit: 3, window: 1s } }
///     missing_key: reject
///     headers: true
///   - name: per-client
///     key: { client_ip: { trusted_proxies: ["10.0.0.0/8", "::1"] } }
///     limit: { sliding_log: { limit: 20, window: 10s, log_rejected: true } }
///     ban: 1m
///     max_keys: 100000
///   - name: upload
///     key: global
///     limit: { gcra: { rate: "10", burst: 2, queue: 20 } }
///   - name: hourly
///     key: user_id
///     limit: { fixed_window: { limit: 1000, window: 1h } }
///     shadow: true
/// "#)?;
/// assert_eq!(rules.len(), 4);
/// assert_eq!(rules[1].name(), "per-client");
///
/// let err = tollgate_throttle::rules_from_yaml(
///     "rules:\n  - name: r\n    key: global\n    limit: { fixed_window: { limit: 0, window: 1s } }\n",
/// )
/// .unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid throttle rules: rule \"r\": invalid limit: a limit of zero admits nothing"
/// );
/// # Ok::<(), tollgate_throttle::RulesError>(())
/// ```
///
/// # Errors
///
/// Malformed YAML, unknown fields, a bad rate, duration, limit or network.
pub fn rules_from_yaml(text: &str) -> Result<Vec<Rule>, RulesError> {
    let file = parse_file(text)?;
    let shared = file.store.is_some();
    let rules = rules_of(file.rules)?;
    if shared {
        for rule in &rules {
            RedisStore::supports_rule(rule).map_err(|e| RulesError::new("store", e))?;
        }
    }
    Ok(rules)
}

/// The Redis store a rules document names under `store:`, not yet
/// connected ([`RedisStoreBuilder::connect`]); `None` when the rules keep
/// their state in memory.
///
/// | field | meaning |
/// |---|---|
/// | `url` | `redis://[user:password@]HOST:PORT[/DB]`, `rediss://` (TLS), `redis+sentinel://HOST:PORT[,HOST:PORT]/MASTER[/DB]`, or a Redis Cluster's seed nodes, `redis://HOST:PORT,redis://HOST:PORT...` |
/// | `cluster` | instead of `url`: a Redis Cluster's seed nodes, `[redis://HOST:PORT, ...]` |
/// | `ca` | the CA (a PEM file) of `rediss://` servers, instead of the system's roots |
/// | `prefix` | the keys' prefix (default `tollgate:`) |
/// | `pool_size` | multiplexed connections (default 2) |
/// | `deadline` | the longest a decision waits for Redis (default 10ms) |
/// | `connect_timeout` | the longest start-up and each reconnection try wait (default 2s) |
/// | `on_error` | when Redis fails: `allow`, `deny` or `local` (default: each replica alone at the limit divided by `replicas`) |
/// | `replicas` | how many replicas share the limits (default 1) |
/// | `over_limit_cache` | keys over their limit each replica answers itself until they could admit (default 10000; 0: none) |
///
/// The store is fixed when the throttler is built: a reload applies the
/// rules only. With a store, every rule must be one it keeps
/// ([`RedisStore::supports_rule`]), or [`rules_from_yaml`] fails.
///
/// # Examples
///
/// ```
/// let text = r#"
/// store:
///   url: redis://127.0.0.1:6379
///   deadline: 10ms
///   on_error: local
///   replicas: 3
/// rules:
///   - name: per-api-key
///     key: { header: x-api-key }
///     limit: { gcra: { rate: "100", burst: 100 } }
/// "#;
/// assert!(tollgate_throttle::store_from_yaml(text)?.is_some());
/// let err = tollgate_throttle::store_from_yaml(
///     "store: { url: \"redis//nowhere\" }\nrules: []\n",
/// )
/// .unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid throttle rules: store: invalid redis store: cannot parse \"redis//nowhere\": \
///      the scheme is none of redis://, rediss://, redis+sentinel://"
/// );
/// # Ok::<(), tollgate_throttle::RulesError>(())
/// ```
///
/// # Errors
///
/// Malformed YAML, a URL that cannot be parsed, both or neither of `url`
/// and `cluster`, a bad duration or `on_error`.
pub fn store_from_yaml(text: &str) -> Result<Option<RedisStoreBuilder>, RulesError> {
    parse_file(text)?
        .store
        .map(StoreConfig::builder)
        .transpose()
}

fn parse_file(text: &str) -> Result<File, RulesError> {
    // Enums as single-key maps (`{ header: x-api-key }`), not YAML tags.
    serde_norway::with::singleton_map_recursive::deserialize(serde_norway::Deserializer::from_str(
        text,
    ))
    .map_err(|e| RulesError::new("yaml", e))
}

fn rules_of(rules: Vec<RuleConfig>) -> Result<Vec<Rule>, RulesError> {
    rules
        .into_iter()
        .map(|r| {
            let key = match r.key {
                KeyConfig::Header(h) => Extract::header(&h),
                KeyConfig::GrpcMetadata(h) => Extract::grpc_metadata(&h),
                KeyConfig::PeerIp => Extract::peer_ip(),
                KeyConfig::ClientIp(c) => Extract::client_ip(
                    Trust::networks(&c.trusted_proxies)
                        .map_err(|e| RulesError::new(format!("rule \"{}\"", r.name), e))?,
                ),
                KeyConfig::UserId => Extract::user_id(),
                KeyConfig::Global => Extract::global(),
                KeyConfig::MethodPath => Extract::method_and_path(),
            };
            let mut rule = Rule::new(r.name.as_str(), key, r.limit.build(&r.name)?);
            if let Some(soft) = r.soft {
                rule = rule.soft(soft.build(&r.name)?);
            }
            if let Some(ban) = r.ban {
                rule = rule.ban(duration(&r.name, "ban", &ban)?);
            }
            if r.shadow {
                rule = rule.mode(Mode::Shadow);
            }
            if let Some(max) = r.max_keys {
                rule = rule.max_keys(max);
            }
            if r.headers {
                rule = rule.ratelimit_headers(true);
            }
            if let Some(n) = r.slice {
                rule = rule.slice(n);
            }
            if let Some(e) = r.slice_expiry {
                rule = rule.slice_expiry(duration(&r.name, "slice_expiry", &e)?);
            }
            if let Some(m) = r.missing_key {
                rule = rule.missing_key(match m {
                    MissingKeyConfig::Shared => MissingKey::Shared,
                    MissingKeyConfig::Reject => MissingKey::Reject,
                    MissingKeyConfig::Skip => MissingKey::Skip,
                });
            }
            Ok(rule)
        })
        .collect()
}

/// Reads throttle rules from a YAML file.
///
/// # Errors
///
/// The file cannot be read, or [`rules_from_yaml`] rejects it.
pub fn rules_from_file(path: &Path) -> Result<Vec<Rule>, RulesError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RulesError::new(format!("reading {}", path.display()), e))?;
    rules_from_yaml(&text)
}

/// Reloads `throttler`'s rules from `path`; a bad file is logged and the
/// current rules stay. Returns whether the new rules were applied.
pub fn reload_rules(throttler: &Throttler, path: &Path) -> bool {
    reload_file(throttler, path)
}

/// Spawns a task that reloads the rules from `path` on SIGHUP (on Unix)
/// and whenever the file's modification time changes, polled every
/// `poll`; each outcome is logged, and a bad file keeps the current rules.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn_rules_reload(
    throttler: Throttler,
    path: PathBuf,
    poll: Duration,
) -> tokio::task::JoinHandle<()> {
    watch_file(throttler, path, poll, hangup())
}

/// A throttler's rules reload whole, through the service kit's watchers.
impl Reload for Throttler {
    type Config = Vec<Rule>;
    type Error = RulesError;
    const WHAT: &'static str = "throttle rules";

    fn read_file(path: &Path) -> Result<Vec<Rule>, RulesError> {
        rules_from_file(path)
    }

    fn parse(text: &str) -> Result<Vec<Rule>, RulesError> {
        rules_from_yaml(text)
    }

    fn apply(&self, rules: Vec<Rule>) {
        self.reload(rules);
    }
}
