//! [`RedisStoreBuilder`]: a [`RedisStore`]'s settings, and the connection
//! that makes one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate::Clock;
use tollgate_service::redis_link::LinkSettings;

use super::cache::OverLimit;
use super::slices::Slices;
use super::{script, OnError, RedisStore, StoreError, StoreInner};

/// Builds a [`RedisStore`] (see [`RedisStore::builder`]).
#[derive(Debug)]
pub struct RedisStoreBuilder {
    link: LinkSettings,
    clock: Option<Arc<dyn Clock>>,
    cache_keys: usize,
}

impl RedisStoreBuilder {
    /// The defaults, at `url` (see [`RedisStore::builder`]).
    pub(super) fn new(url: String) -> RedisStoreBuilder {
        RedisStoreBuilder {
            link: LinkSettings::new(url, "tollgate:"),
            clock: None,
            cache_keys: 10_000,
        }
    }

    /// A Redis Cluster reached through these seed nodes (`redis://` or
    /// `rediss://` URLs) instead of the builder's URL.
    pub fn cluster<S: Into<String>>(mut self, seeds: impl IntoIterator<Item = S>) -> Self {
        self.link.cluster = seeds.into_iter().map(Into::into).collect();
        self
    }

    /// Trusts the CA in this PEM file for `rediss://` servers, instead of
    /// the system's roots.
    pub fn ca(mut self, ca_file: impl Into<PathBuf>) -> Self {
        self.link.ca = Some(ca_file.into());
        self
    }

    /// The prefix of every key (default `tollgate:`); several throttlers
    /// share a limit by sharing a prefix and a rule name.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.link.prefix = prefix.into();
        self
    }

    /// Multiplexed connections, used in turn (default 2).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.link.pool_size = n.max(1);
        self
    }

    /// The longest a decision waits for Redis (default 10 ms); past it the
    /// [`OnError`] mode decides.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.link.deadline = deadline;
        self
    }

    /// The longest [`connect`](Self::connect) and each reconnection try
    /// take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.link.connect_timeout = timeout;
        self
    }

    /// What a decision does when Redis fails (default [`OnError::Local`]).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.link.on_error = on_error;
        self
    }

    /// How many replicas share the limits (default 1): under
    /// [`OnError::Local`] each decides alone at `limit / replicas`.
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.link.replicas = replicas.max(1);
        self
    }

    /// How many keys known to be over their limit this replica answers
    /// itself, without calling Redis, until they could admit again
    /// (default 10 000; 0: none). Such an answer is the one Redis would
    /// give (see the README's Redis section for when a throttler uses it).
    pub fn over_limit_cache(mut self, keys: usize) -> Self {
        self.cache_keys = keys;
        self
    }

    /// Decides at this clock's time instead of Redis' `TIME`: for tests,
    /// which drive every replica from one manual clock. Windows then align
    /// to this clock's origin.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Connects, within the connect timeout.
    ///
    /// Needs a tokio runtime: each connection's reconnection runs as a task.
    ///
    /// # Errors
    ///
    /// A URL that cannot be parsed, a CA file that cannot be read (or
    /// given for a server without TLS), a key prefix with a brace, or a Redis
    /// that cannot be reached (or does not answer `PING`) in time: one
    /// line naming the URL and why.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let link = self.link.connect("throttle store").await?;
        Ok(RedisStore {
            inner: Arc::new(StoreInner {
                cache: OverLimit::new(self.cache_keys, self.clock.clone()),
                slices: Slices::new(self.clock.clone()),
                sweeper: std::sync::OnceLock::new(),
                batcher: super::batch::Batcher::new(self.link.pool_size),
                link,
                script: redis::Script::new(&script::source()),
                prefix: self.link.prefix,
                deadline: self.link.deadline,
                on_error: self.link.on_error,
                replicas: self.link.replicas,
                clock: self.clock,
            }),
        })
    }
}
