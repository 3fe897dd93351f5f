//! [`QuotaStore`]: the quota service's buckets kept in Redis, so that
//! several quota servers behind one address answer as one.
//!
//! # Implementation notes
//!
//! One Allow is one reservation of one Lua script (`store/reserve.lua`,
//! loaded once and called by its SHA-1, loaded again on `NOSCRIPT`); the
//! Allows that arrive while every connection has a call in flight go
//! together as one call, deciding each in turn exactly as alone
//! (`store/batch.rs`). The script has the in-memory
//! [`TokenBucket`](tollgate::TokenBucket)'s exact integer arithmetic: the
//! level in the core's fixed-point tokens (2^20 per op), signed for debt,
//! the meter's carry below one token, and the time the level is up to
//! date with. Redis' Lua has only doubles, so the script computes on
//! 24-bit limbs above 2^48; a reservation whose numbers stay small (most)
//! is decided first on a fast path of doubles alone, each product checked
//! below 2^53, before the script defines its limb arithmetic (Redis runs
//! the whole script on every call). The clock is Redis' `TIME`, so
//! servers with skewed clocks agree; a store built with
//! [`QuotaStore::clock`] passes that clock's time instead (tests).
//!
//! The settings (size, max debt, max wait, meter) cross with every call,
//! from the configuration in force on the server that answers, so a
//! reload applies from the next Allow. The state records the size and
//! meter it was kept under: a call under new ones first earns the time up
//! to now at the old rate, then cuts the level to the new size and drops
//! the old meter's carry, as [`TokenBucket::set_settings`] does.
//!
//! A bucket's key is `PREFIX` + the namespace's length + `{NAMESPACE}:` +
//! the bucket's name: the length makes the name unambiguous whatever
//! characters the names hold, and the braces are Redis Cluster's hash
//! tag, so every key of a namespace sits in one slot. Each key expires
//! when its bucket would be full again, and so decide like a fresh one,
//! or when it has been idle for its `max_idle_millis`, after which the
//! in-memory reaper would have removed it: Redis holds only buckets in
//! use. The dynamic buckets of a namespace with a `max_dynamic_buckets`
//! are counted in a sorted set (`PREFIX` + length + `{NAMESPACE}`) scored
//! by the millisecond each turns idle (never, without a max idle: then the
//! cap bounds the set), and a new name past the cap is refused.
//!
//! [`TokenBucket::set_settings`]: tollgate::TokenBucket::set_settings

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{BucketSettings, Clock};
use tollgate_service::redis_link::{LinkSettings, StoreError};

mod batch;

/// The script every Allow runs.
const SOURCE: &str = include_str!("store/reserve.lua");

pub use tollgate_service::redis_link::OnError;

/// Where and how a quota server keeps its buckets in Redis: give it to
/// [`Quota::with_store`](crate::Quota::with_store), and every server with
/// the same Redis and key prefix shares every bucket.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_quota::{AllowRequest, OnError, Quota, QuotaConfig, QuotaLimits, QuotaStore, Status};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = QuotaConfig::from_yaml("global_default_bucket: {size: 10, fill_rate: 5}\n")?;
/// let store = QuotaStore::new("redis://127.0.0.1:6379")?
///     .deadline(Duration::from_millis(10))
///     .on_error(OnError::Local)
///     .replicas(3);
/// let clock = Arc::new(tollgate::SystemClock::new());
/// let quota = Quota::with_store(config, QuotaLimits::default(), clock, store).await?;
/// let decision = quota.allow_async(&AllowRequest::new("any", "bucket", 3)).await;
/// assert_eq!(decision.status, Status::Ok);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct QuotaStore {
    link: LinkSettings,
    clock: Option<Arc<dyn Clock>>,
}

impl QuotaStore {
    /// A store at `url`: `redis://[user:password@]host:port[/db]`,
    /// `rediss://` (TLS, the system's roots or [`ca`](Self::ca)),
    /// `redis+sentinel://host:port[,host:port...]/MASTER[/db]`, or a
    /// comma-separated list of two or more `redis://` URLs (a Redis
    /// Cluster's seed nodes, as [`cluster`](Self::cluster)); the key
    /// prefix `tollgate:quota:`, 2 connections, a deadline of 10 ms, a
    /// connect timeout of 2 s, [`OnError::Local`] and one replica.
    ///
    /// # Errors
    ///
    /// A URL that cannot be parsed: one line naming it and why.
    pub fn new(url: impl Into<String>) -> Result<QuotaStore, StoreError> {
        let link = LinkSettings::new(url, "tollgate:quota:");
        link.check()?;
        Ok(QuotaStore { link, clock: None })
    }

    /// A Redis Cluster reached through these seed nodes (`redis://` or
    /// `rediss://` URLs), with the defaults of [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// Seeds that cannot be used: one line naming them and why.
    pub fn cluster<S: Into<String>>(
        seeds: impl IntoIterator<Item = S>,
    ) -> Result<QuotaStore, StoreError> {
        let mut link = LinkSettings::new("", "tollgate:quota:");
        link.cluster = seeds.into_iter().map(Into::into).collect();
        link.check()?;
        Ok(QuotaStore { link, clock: None })
    }

    /// Trusts the CA in this PEM file for `rediss://` servers, instead of
    /// the system's roots. The file is read when connecting.
    pub fn ca(mut self, ca_file: impl Into<PathBuf>) -> QuotaStore {
        self.link.ca = Some(ca_file.into());
        self
    }

    /// The prefix of every key (default `tollgate:quota:`); servers share
    /// buckets by sharing a prefix. A brace in it is refused when
    /// connecting (it would move the hash tag).
    pub fn prefix(mut self, prefix: impl Into<String>) -> QuotaStore {
        self.link.prefix = prefix.into();
        self
    }

    /// Multiplexed connections, used in turn (default 2, at least 1).
    pub fn pool_size(mut self, n: usize) -> QuotaStore {
        self.link.pool_size = n.max(1);
        self
    }

    /// The longest an Allow waits for Redis (default 10 ms); past it the
    /// [`OnError`] mode answers.
    pub fn deadline(mut self, deadline: Duration) -> QuotaStore {
        self.link.deadline = deadline;
        self
    }

    /// The longest connecting at start-up, and each reconnection try, take
    /// (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> QuotaStore {
        self.link.connect_timeout = timeout;
        self
    }

    /// What an Allow is answered when Redis fails (default
    /// [`OnError::Local`]).
    pub fn on_error(mut self, on_error: OnError) -> QuotaStore {
        self.link.on_error = on_error;
        self
    }

    /// How many servers share the buckets (default 1): under
    /// [`OnError::Local`] each decides alone at `fill_rate / replicas`.
    pub fn replicas(mut self, replicas: u32) -> QuotaStore {
        self.link.replicas = replicas.max(1);
        self
    }

    /// Decides at this clock's time instead of Redis' `TIME`: for tests,
    /// which drive every server from one manual clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> QuotaStore {
        self.clock = Some(clock);
        self
    }

    /// What an Allow is answered when Redis fails.
    pub fn on_error_mode(&self) -> OnError {
        self.link.on_error
    }

    /// Connects, within the connect timeout.
    pub(crate) async fn connect(self) -> Result<Connected, StoreError> {
        let link = self.link.connect("quota store").await?;
        let script = redis::Script::new(&tollgate_service::redis_link::with_limbs(SOURCE));
        Ok(Connected {
            calls: batch::Batcher::new(link, script, self.link.deadline, self.link.pool_size),
            store: self,
        })
    }
}

/// Equal settings; the test clock is not compared.
impl PartialEq for QuotaStore {
    fn eq(&self, other: &QuotaStore) -> bool {
        self.link == other.link
    }
}

/// The URL's password is not shown.
impl fmt::Debug for QuotaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaStore")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

/// One reservation the script decides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    /// Ops to reserve; `None`: the request asks too many, so only a new
    /// dynamic bucket's room is checked.
    pub(crate) ops: Option<u64>,
    pub(crate) settings: BucketSettings,
    /// The max wait in force (the request's, if lower).
    pub(crate) max_wait: Duration,
    /// For a dynamic bucket of a namespace with a cap, the cap.
    pub(crate) dynamic_cap: Option<u64>,
    /// How long the bucket may go unused before it starts afresh.
    pub(crate) max_idle: Option<Duration>,
}

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reserved {
    /// Granted: wait this long before using the tokens.
    Granted(Duration),
    /// Refused for the max wait or the max debt; nothing claimed.
    Refused,
    /// A new dynamic bucket past its namespace's cap.
    TooManyBuckets,
    /// Too many tokens asked, with room for the bucket.
    TooManyTokens,
}

/// A connected store.
pub(crate) struct Connected {
    calls: batch::Batcher,
    store: QuotaStore,
}

impl Connected {
    /// What an Allow is answered when Redis fails.
    pub(crate) fn on_error(&self) -> OnError {
        self.store.link.on_error
    }

    /// The servers sharing the buckets.
    pub(crate) fn replicas(&self) -> u32 {
        self.store.link.replicas
    }

    /// The settings it was connected with.
    pub(crate) fn settings(&self) -> &QuotaStore {
        &self.store
    }

    /// The key of bucket `name` of `namespace`.
    fn key(&self, namespace: &str, name: &str) -> String {
        format!(
            "{}{}{{{namespace}}}:{name}",
            self.store.link.prefix,
            namespace.len()
        )
    }

    /// The key of `namespace`'s set of live dynamic buckets.
    fn dynamic_key(&self, namespace: &str) -> String {
        format!(
            "{}{}{{{namespace}}}",
            self.store.link.prefix,
            namespace.len()
        )
    }

    /// Decides `r` in Redis, alone or in a batch, within the deadline.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the tokens reserved in Redis.
    pub(crate) async fn reserve(&self, r: &Reservation<'_>) -> Result<Reserved, StoreError> {
        let mut keys = vec![self.key(r.namespace, r.name)];
        if r.dynamic_cap.is_some() {
            keys.push(self.dynamic_key(r.namespace));
        }
        let args = args(r, self.store.clock.as_ref().map(|c| c.now_ns()));
        self.calls.reserve(batch::Call { keys, args }).await
    }
}

impl fmt::Debug for Connected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connected")
            .field("calls", &self.calls)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The core meter's exact rate for `nano_ops_per_sec` (> 0): tokens per
/// nanosecond as `(whole, fraction, den)`.
fn meter(nano_ops_per_sec: u128) -> (u128, u128, u128) {
    tollgate::pool::Meter::new(nano_ops_per_sec).parts()
}

/// Nanoseconds, at most `u64::MAX`, as the bucket compares them.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The script's arguments for `r` at `now_ns` (`None`: Redis' `TIME`).
fn args(r: &Reservation<'_>, now_ns: Option<u64>) -> [String; 12] {
    let s = &r.settings;
    let (whole, fraction, den) = meter(s.rate().nano_ops_per_sec());
    [
        if r.ops.is_some() { "reserve" } else { "refuse" }.to_owned(),
        now_ns.map(|t| t.to_string()).unwrap_or_default(),
        r.ops.unwrap_or(0).to_string(),
        s.size_ops().to_string(),
        whole.to_string(),
        fraction.to_string(),
        den.to_string(),
        nanos(s.max_debt_duration()).to_string(),
        nanos(r.max_wait).to_string(),
        r.dynamic_cap.map(|c| c.to_string()).unwrap_or_default(),
        r.name.to_owned(),
        r.max_idle.map(|d| nanos(d).to_string()).unwrap_or_default(),
    ]
}

/// The script's answer.
fn answer(reply: &[String]) -> Result<Reserved, StoreError> {
    let bad = || StoreError::Redis(format!("the quota script answered {reply:?}"));
    let [code, value, _now] = reply else {
        return Err(bad());
    };
    match code.as_str() {
        "OK" => value
            .parse()
            .map(|ns| Reserved::Granted(Duration::from_nanos(ns)))
            .map_err(|_| bad()),
        "W" | "D" => Ok(Reserved::Refused),
        "B" => Ok(Reserved::TooManyBuckets),
        "T" => Ok(Reserved::TooManyTokens),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::pool::Meter;

    #[test]
    fn the_meter_crosses_as_the_cores_exact_fraction() {
        for nano in [
            1_000_000u128,
            10_000_000_000,
            7_000_000_001,
            300_000_000_000_000_000,
        ] {
            let (whole, fraction, den) = meter(nano);
            let core = Meter::new(nano);
            for ns in [0u64, 1, 999, 1_000_000_007, u64::MAX / 3] {
                let ns128 = u128::from(ns);
                assert_eq!(
                    ns128 * whole + ns128 * fraction / den,
                    core.tokens_floor(ns),
                    "{nano} at {ns}"
                );
            }
        }
    }

    #[test]
    fn a_password_is_not_shown() {
        let store = QuotaStore::new("redis://app:s3cret@redis.internal:6379/2").unwrap();
        assert!(format!("{store:?}").contains("redis://app:***@redis.internal:6379/2"));
        let store = QuotaStore::new("rediss://:pw@h:1").unwrap();
        assert!(!format!("{store:?}").contains("pw"));
    }

    #[test]
    fn a_bad_url_or_mode_is_one_line() {
        let e = QuotaStore::new("http://localhost:6379").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid redis store: cannot parse \"http://localhost:6379\": the scheme is none of \
             redis://, rediss://, redis+sentinel://"
        );
        assert!(QuotaStore::new("redis://127.0.0.1:6379").is_ok());
        assert!("local".parse::<OnError>().is_ok());
    }
}
