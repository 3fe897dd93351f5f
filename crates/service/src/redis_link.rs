//! The connections to Redis that the Redis stores (the throttler's and the
//! quota service's) share: which server (standalone, Sentinel, Cluster),
//! a few multiplexed connections used in turn, each reconnected by its own
//! task with backoff and jitter, and a rate-limited log of failures.
//!
//! # Implementation notes
//!
//! A slot holds its connection, or nothing while it is broken. A call
//! takes the next slot's connection (a clone: the connection is a handle
//! on one pipelined socket), and a call that fails on a broken socket
//! empties the slot and wakes its task. A call that finds the slot empty
//! fails at once, so a request never waits for a reconnection. The task
//! tries to connect, then sleeps `min(10 ms * 2^n, 1 s)`, a random
//! fraction of it between a half and all (so replicas do not reconnect in
//! step), and tries again. The tasks hold the slots weakly; dropping the
//! link wakes them to end.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::{LockUnpoisoned, RwLockUnpoisoned};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, RedisError, ScriptInvocation, TlsCertificates};
use tokio::sync::Notify;

/// The first reconnection backoff.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest reconnection backoff.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per this long.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The multi-limb integer library of the Redis stores' Lua scripts:
/// natural numbers of any size (24-bit limbs from 2^48 on, doubles below)
/// with `parse`, `str`, `cmp`, `add`, `sub`, `mul` and `divq`, for the
/// exact integer arithmetic of the policies in Redis' Lua, whose numbers
/// are doubles. A script carries it with [`with_limbs`].
pub const LIMBS: &str = include_str!("redis_link/limbs.lua");

/// `source` with [`LIMBS`] in place of its first line `--@limbs`, so the
/// library's functions are defined only past what comes before (a fast
/// path that needs none of them).
///
/// # Examples
///
/// ```
/// use tollgate_service::redis_link::with_limbs;
///
/// let script = with_limbs("local x = 1\n--@limbs\nreturn str(add(x, 2))\n");
/// assert!(script.starts_with("local x = 1\n"));
/// assert!(script.contains("local function divq(a, b)"));
/// assert!(!script.contains("--@limbs"));
/// ```
pub fn with_limbs(source: &str) -> String {
    source.replacen("--@limbs\n", LIMBS, 1)
}

/// The hash tag of a Redis key, the part Redis Cluster hashes to find its
/// slot: the text between its first `{` and the next `}`, or the whole key
/// when there is none or it is empty. A script's keys must share one.
///
/// # Examples
///
/// ```
/// use tollgate_service::redis_link::hash_tag;
///
/// assert_eq!(hash_tag("p:{alice}:rule"), "alice");
/// assert_eq!(hash_tag("p:{a}b}:x"), "a");
/// assert_eq!(hash_tag("p:{}:x"), "p:{}:x");
/// assert_eq!(hash_tag("p:{open"), "p:{open");
/// ```
pub fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}').map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

mod store_error;

pub use store_error::StoreError;

/// What a store's caller answers when Redis does not answer within the
/// deadline (or is unreachable): the throttler's and the quota service's
/// Redis stores and `tollgate rls --store` each take one.
///
/// # Examples
///
/// ```
/// use tollgate_service::redis_link::OnError;
///
/// assert_eq!("deny".parse::<OnError>(), Ok(OnError::Deny));
/// assert_eq!(
///     "open".parse::<OnError>().unwrap_err().to_string(),
///     "invalid redis store: on_error \"open\" is none of allow, deny, local"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnError {
    /// Admit, charging nothing (fail open): a throttler's request passes,
    /// a quota Allow is `OK` with no wait, an rls descriptor is `OK` with
    /// its whole limit remaining.
    Allow,
    /// Refuse (fail closed): a throttler rejects with a retry time of one
    /// second, quota answers `REJECTED_SERVER_ERROR`, rls `OVER_LIMIT`.
    Deny,
    /// Decide on this replica's own in-memory state, each limit or rate
    /// divided by the store's number of replicas, so that the replicas
    /// together keep about the limit (the default).
    #[default]
    Local,
}

impl std::str::FromStr for OnError {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<OnError, StoreError> {
        match s {
            "allow" => Ok(OnError::Allow),
            "deny" => Ok(OnError::Deny),
            "local" => Ok(OnError::Local),
            _ => Err(StoreError::Config(format!(
                "on_error \"{s}\" is none of allow, deny, local"
            ))),
        }
    }
}

/// Where a Redis store keeps its state and how it reaches it: the
/// settings that the throttler's `RedisStoreBuilder` and the quota
/// service's `QuotaStore` share, each with its own defaults and builder
/// methods over them.
///
/// # Examples
///
/// ```
/// use tollgate_service::redis_link::LinkSettings;
///
/// let mut settings = LinkSettings::new("redis://10.0.0.1:6379,redis://10.0.0.2:6379", "app:");
/// settings.pool_size = 4;
/// assert_eq!(settings.check(), Ok(()));
/// assert_eq!(
///     LinkSettings::new("redis://h:1", "a{b}:").check().unwrap_err().to_string(),
///     "invalid redis store: the key prefix \"a{b}:\" holds a brace, which would move the hash tag"
/// );
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LinkSettings {
    /// `redis://[user:password@]host:port[/db]`, `rediss://` (TLS),
    /// `redis+sentinel://host:port[,host:port...]/MASTER[/db]`, or a
    /// comma-separated list of two or more `redis://` (or `rediss://`)
    /// URLs: a Cluster's seed nodes.
    pub url: String,
    /// A Cluster's seed nodes instead of [`url`](Self::url), when not
    /// empty.
    pub cluster: Vec<String>,
    /// The CA (a PEM file) that `rediss://` servers' certificates must
    /// chain to, instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// The prefix of every key; a brace in it is refused, as it would
    /// move the hash tag.
    pub prefix: String,
    /// Multiplexed connections, used in turn (at least 1; default 2).
    pub pool_size: usize,
    /// The longest a call waits for Redis (default 10 ms).
    pub deadline: Duration,
    /// The longest connecting at start-up, and each reconnection try,
    /// take (default 2 s).
    pub connect_timeout: Duration,
    /// What a call's caller answers when Redis fails (default
    /// [`OnError::Local`]).
    pub on_error: OnError,
    /// How many replicas share the store, for [`OnError::Local`] (at
    /// least 1; default 1).
    pub replicas: u32,
}

impl LinkSettings {
    /// The defaults, at `url` (a list of two or more seeds becomes
    /// [`cluster`](Self::cluster)), every key under `prefix`.
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> LinkSettings {
        let mut url = url.into();
        let mut cluster = seeds(&url);
        if cluster.len() > 1 {
            url.clear();
        } else {
            cluster.clear();
        }
        LinkSettings {
            url,
            cluster,
            ca: None,
            prefix: prefix.into(),
            pool_size: 2,
            deadline: Duration::from_millis(10),
            connect_timeout: Duration::from_secs(2),
            on_error: OnError::Local,
            replicas: 1,
        }
    }

    /// Checks the settings without connecting: the URL or seeds, the CA
    /// file, the key prefix.
    ///
    /// # Errors
    ///
    /// [`StoreError::Config`], one line naming what is wrong.
    pub fn check(&self) -> Result<(), StoreError> {
        self.target().map(|_| ())
    }

    /// Connects `pool_size` connections, the first now (within the
    /// connect timeout); failures are logged as `what` (`throttle store`,
    /// `quota store`).
    ///
    /// Needs a tokio runtime: each connection's reconnection is a task.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), or [`StoreError::Unreachable`] when the
    /// first connection cannot be made (or does not answer `PING`) in
    /// time.
    pub async fn connect(&self, what: &'static str) -> Result<Link, StoreError> {
        let target = self.target()?;
        Link::connect(target, self.pool_size, self.connect_timeout, what).await
    }

    fn target(&self) -> Result<Target, StoreError> {
        if self.prefix.contains(['{', '}']) {
            return Err(StoreError::Config(format!(
                "the key prefix \"{}\" holds a brace, which would move the hash tag",
                self.prefix
            )));
        }
        let ca = match &self.ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                StoreError::Config(format!("cannot read the CA file {}: {e}", path.display()))
            })?),
            None => None,
        };
        if self.cluster.is_empty() {
            Target::parse(&self.url, ca)
        } else {
            Target::cluster(&self.cluster, ca)
        }
    }
}

/// The URL's password is not shown.
impl fmt::Debug for LinkSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkSettings")
            .field("url", &redacted(&self.url))
            .field(
                "cluster",
                &self.cluster.iter().map(|u| redacted(u)).collect::<Vec<_>>(),
            )
            .field("ca", &self.ca)
            .field("prefix", &self.prefix)
            .field("pool_size", &self.pool_size)
            .field("deadline", &self.deadline)
            .field("connect_timeout", &self.connect_timeout)
            .field("on_error", &self.on_error)
            .field("replicas", &self.replicas)
            .finish()
    }
}

/// `url` with its password, if any, replaced by `***`, for logs.
fn redacted(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    match url[start..].find('@') {
        Some(at) => {
            let userinfo = &url[start..start + at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..start], &url[start + at..])
        }
        None => url.to_owned(),
    }
}

/// The URLs of a comma-separated list: a comma starts a new URL only
/// before `redis://` or `rediss://`, so a password may hold one.
fn seeds(list: &str) -> Vec<String> {
    let mut seeds: Vec<String> = Vec::new();
    for part in list.split(',') {
        match seeds.last_mut() {
            Some(last) if !(part.starts_with("redis://") || part.starts_with("rediss://")) => {
                last.push(',');
                last.push_str(part);
            }
            _ => seeds.push(part.to_owned()),
        }
    }
    seeds
}

/// Where Redis is.
enum Target {
    /// One server.
    Single(Client),
    /// The master that Sentinels name.
    Sentinel {
        client: tokio::sync::Mutex<SentinelClient>,
        master: String,
    },
    /// A Cluster, through its seed nodes.
    Cluster(ClusterClient),
}

impl Target {
    /// A `redis://`, `rediss://` or `redis+sentinel://` URL, or a
    /// comma-separated list of two or more Cluster seeds; `rediss://`
    /// servers' certificates chain to `ca` (PEM) if given.
    fn parse(url: &str, ca: Option<Vec<u8>>) -> Result<Target, StoreError> {
        let bad = |why: String| StoreError::Config(format!("cannot parse \"{url}\": {why}"));
        let seeds = seeds(url);
        if seeds.len() > 1 {
            return Target::cluster(&seeds, ca);
        }
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            if ca.is_some() {
                return Err(bad(
                    "a CA is for rediss:// servers; Sentinel here is redis:// only".into(),
                ));
            }
            let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
            let mut path = path.split('/');
            let master = path.next().filter(|m| !m.is_empty()).ok_or_else(|| {
                bad("no master name (redis+sentinel://HOST:PORT[,HOST:PORT]/MASTER[/DB])".into())
            })?;
            let db = match path.next() {
                Some(db) if !db.is_empty() => db
                    .parse::<i64>()
                    .map_err(|_| bad(format!("the database \"{db}\" is not a number")))?,
                _ => 0,
            };
            let sentinels: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("redis://{h}"))
                .collect();
            if sentinels.is_empty() {
                return Err(bad("no sentinel address".into()));
            }
            let node = SentinelNodeConnectionInfo {
                tls_mode: None,
                redis_connection_info: Some(redis::RedisConnectionInfo {
                    db,
                    ..Default::default()
                }),
            };
            let client = SentinelClient::build(
                sentinels,
                master.to_owned(),
                Some(node),
                SentinelServerType::Master,
            )
            .map_err(|e| bad(e.to_string()))?;
            return Ok(Target::Sentinel {
                client: tokio::sync::Mutex::new(client),
                master: master.to_owned(),
            });
        }
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(bad(
                "the scheme is none of redis://, rediss://, redis+sentinel://".into(),
            ));
        }
        let client = match ca {
            Some(_) if !url.starts_with("rediss://") => {
                return Err(bad("a CA is for rediss:// (TLS) servers only".into()))
            }
            Some(root_cert) => Client::build_with_tls(
                url,
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                },
            ),
            None => Client::open(url),
        };
        client.map(Target::Single).map_err(|e| bad(e.to_string()))
    }

    /// A Cluster reached through `seeds`, their certificates chaining to
    /// `ca` (PEM) if given.
    fn cluster(seeds: &[String], ca: Option<Vec<u8>>) -> Result<Target, StoreError> {
        let bad = |why: String| {
            StoreError::Config(format!(
                "cannot use the cluster seeds {}: {why}",
                seeds.join(",")
            ))
        };
        let mut builder = ClusterClientBuilder::new(seeds.to_vec());
        if let Some(root_cert) = ca {
            if !seeds.iter().all(|s| s.starts_with("rediss://")) {
                return Err(bad("a CA is for rediss:// (TLS) seeds only".into()));
            }
            builder = builder.certs(TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            });
        }
        builder
            .build()
            .map(Target::Cluster)
            .map_err(|e| bad(e.to_string()))
    }

    /// A new connection, answering `PING`, within `timeout`.
    async fn open(&self, timeout: Duration) -> Result<Conn, StoreError> {
        let config = AsyncConnectionConfig::new().set_connection_timeout(timeout);
        let attempt = async {
            let mut conn = match self {
                Target::Single(client) => Conn::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ),
                Target::Sentinel { client, .. } => Conn::Single(
                    client
                        .lock()
                        .await
                        .get_async_connection_with_config(&config)
                        .await?,
                ),
                Target::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
            };
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            Ok::<Conn, RedisError>(conn)
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(StoreError::Unreachable(format!("{self}: {e}"))),
            Err(_) => Err(StoreError::Unreachable(format!(
                "{self}: no connection within {timeout:?}"
            ))),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Single(client) => write!(f, "{}", client.get_connection_info().addr),
            Target::Sentinel { master, .. } => write!(f, "redis sentinel master \"{master}\""),
            Target::Cluster(_) => f.write_str("redis cluster"),
        }
    }
}

/// A connection of either kind.
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// One connection's place.
#[derive(Default)]
struct Slot {
    conn: RwLock<Option<Conn>>,
    /// Wakes the slot's reconnection task.
    broken: Arc<Notify>,
}

struct Shared {
    target: Target,
    slots: Vec<Slot>,
    connect_timeout: Duration,
    log: FailureLog,
}

/// The connections to one Redis.
pub struct Link {
    shared: Arc<Shared>,
    next: AtomicUsize,
}

impl Link {
    /// `pool_size` connections to `target`, the first made now (within
    /// `connect_timeout`): see [`LinkSettings::connect`].
    async fn connect(
        target: Target,
        pool_size: usize,
        connect_timeout: Duration,
        what: &'static str,
    ) -> Result<Link, StoreError> {
        let pool_size = pool_size.max(1);
        let first = target.open(connect_timeout).await?;
        let slots: Vec<Slot> = (0..pool_size).map(|_| Slot::default()).collect();
        *slots[0].conn.write_unpoisoned() = Some(first);
        let shared = Arc::new(Shared {
            target,
            slots,
            connect_timeout,
            log: FailureLog {
                what,
                last: Mutex::new(None),
                suppressed: AtomicU64::new(0),
            },
        });
        for index in 0..pool_size {
            let notify = Arc::clone(&shared.slots[index].broken);
            tokio::spawn(reconnect(Arc::downgrade(&shared), index, notify));
            if index > 0 {
                // The others connect in the background, at once.
                shared.slots[index].broken.notify_one();
            }
        }
        Ok(Link {
            shared,
            next: AtomicUsize::new(0),
        })
    }

    /// Whether it is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.shared.target, Target::Cluster(_))
    }

    /// Runs `invocation` on the next connection, within `deadline`; a
    /// connection found broken is reconnected in the background.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unreachable`] at once while every connection is being
    /// reconnected, Redis' error, or [`StoreError::Deadline`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the script run in Redis.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let shared = &self.shared;
        // Relaxed: a turn counter; any spread over the slots will do.
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = shared.slots.len();
        // The next slot with a connection, if any.
        let found = (0..n).find_map(|i| {
            let index = (start + i) % n;
            let conn = shared.slots[index].conn.read_unpoisoned().clone();
            conn.map(|c| (index, c))
        });
        let Some((index, mut conn)) = found else {
            let e = StoreError::Unreachable(format!("{}: reconnecting", shared.target));
            shared.log.failed(&e);
            return Err(e);
        };
        let (error, broken) =
            match tokio::time::timeout(deadline, invocation.invoke_async(&mut conn)).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) => (
                    StoreError::Redis(format!("{}: {e}", shared.target)),
                    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal(),
                ),
                Err(_) => (StoreError::Deadline(deadline), false),
            };
        // Logged before the reconnection starts, so the line names the
        // error that broke the connection rather than a failed reconnection.
        shared.log.failed(&error);
        if broken {
            let slot = &shared.slots[index];
            slot.conn.write_unpoisoned().take();
            slot.broken.notify_one();
        }
        Err(error)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // The tasks hold the slots weakly: woken, they find them gone.
        for slot in &self.shared.slots {
            slot.broken.notify_one();
        }
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("target", &self.shared.target.to_string())
            .field("pool_size", &self.shared.slots.len())
            .finish()
    }
}

/// Reconnects slot `index` each time it breaks, until the link is gone.
async fn reconnect(shared: Weak<Shared>, index: usize, broken: Arc<Notify>) {
    let mut rng = seed(index);
    loop {
        broken.notified().await;
        let mut backoff = BACKOFF_MIN;
        loop {
            let Some(link) = shared.upgrade() else {
                return;
            };
            match link.target.open(link.connect_timeout).await {
                Ok(conn) => {
                    *link.slots[index].conn.write_unpoisoned() = Some(conn);
                    break;
                }
                Err(e) => link.log.failed(&e),
            }
            drop(link);
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            tokio::time::sleep(jittered(backoff, rng)).await;
            backoff = next_backoff(backoff);
        }
    }
}

/// The backoff after `backoff`: twice as long, at most [`BACKOFF_MAX`].
fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(BACKOFF_MAX)
}

/// Between half of `backoff` and all of it, as `random` picks.
fn jittered(backoff: Duration, random: u64) -> Duration {
    let nanos = u64::try_from(backoff.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(nanos / 2 + random % (nanos / 2 + 1))
}

/// A nonzero seed that differs between slots and processes.
fn seed(index: usize) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ (u64::from(std::process::id()) << 32) ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        | 1
}

/// Logs a failure at most once per [`LOG_EVERY`], counting the rest.
struct FailureLog {
    /// Which store the line names.
    what: &'static str,
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl FailureLog {
    fn failed(&self, error: &StoreError) {
        let now = Instant::now();
        let mut last = self.last.lock_unpoisoned();
        if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            // Relaxed: a count for the next log line, read under the lock.
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        let more = self.suppressed.swap(0, Ordering::Relaxed);
        tracing::warn!(
            suppressed = more,
            "{}: {error} ({more} more failures since the last line)",
            self.what
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_not_shown() {
        assert_eq!(
            redacted("redis://app:s3cret@redis.internal:6379/2"),
            "redis://app:***@redis.internal:6379/2"
        );
        assert_eq!(
            redacted("redis://redis.internal:6379"),
            "redis://redis.internal:6379"
        );
        let mut settings = LinkSettings::new("rediss://:pw@h:1", "");
        settings.cluster = vec!["redis://u:pw2@h:2".into()];
        let shown = format!("{settings:?}");
        assert!(!shown.contains("pw"), "{shown}");
    }

    #[test]
    fn a_comma_starts_a_seed_only_before_a_scheme() {
        assert_eq!(
            seeds("redis://a:1,rediss://b:2,redis://u:p,w@c:3"),
            ["redis://a:1", "rediss://b:2", "redis://u:p,w@c:3"]
        );
        assert_eq!(
            seeds("redis+sentinel://a:1,b:2/m"),
            ["redis+sentinel://a:1,b:2/m"]
        );
        let cluster = LinkSettings::new("redis://a:1,redis://b:2", "").target();
        assert!(matches!(cluster, Ok(Target::Cluster(_))));
        let single = LinkSettings::new("redis://u:p,w@a:1", "").target();
        assert!(matches!(single, Ok(Target::Single(_))));
    }

    #[test]
    fn a_ca_is_for_tls_only_and_must_be_read() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").unwrap();
        let with_ca = |url: &str, file: &std::path::Path| {
            let mut settings = LinkSettings::new(url, "");
            settings.ca = Some(file.to_owned());
            settings.check().map_err(|e| e.to_string())
        };
        assert_eq!(with_ca("rediss://127.0.0.1:1", &ca), Ok(()));
        assert_eq!(
            with_ca("redis://127.0.0.1:1", &ca).unwrap_err(),
            "invalid redis store: cannot parse \"redis://127.0.0.1:1\": a CA is for \
             rediss:// (TLS) servers only"
        );
        assert_eq!(
            with_ca("redis://a:1,rediss://b:2", &ca).unwrap_err(),
            "invalid redis store: cannot use the cluster seeds redis://a:1,rediss://b:2: a CA \
             is for rediss:// (TLS) seeds only"
        );
        let missing = dir.path().join("none.pem");
        let e = with_ca("rediss://127.0.0.1:1", &missing).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "invalid redis store: cannot read the CA file {}: ",
                missing.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn backoff_is_jittered_between_half_and_all_of_it() {
        let b = Duration::from_millis(10);
        assert_eq!(jittered(b, 0), Duration::from_millis(5));
        assert_eq!(jittered(b, 5_000_000), Duration::from_millis(10));
        assert_eq!(jittered(b, 5_000_001), Duration::from_millis(5));
        assert_eq!(jittered(b, 1_234_567), Duration::from_nanos(6_234_567));
        // Doubling from 10 ms reaches the cap of 1 s after 7 tries.
        let mut backoff = BACKOFF_MIN;
        let steps: Vec<u64> = (0..9)
            .map(|_| {
                let ms = backoff.as_millis() as u64;
                backoff = next_backoff(backoff);
                ms
            })
            .collect();
        assert_eq!(steps, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }
}
