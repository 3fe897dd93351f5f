//! Rules: which key a request is counted under ([`Extract`]), the limits
//! applied to it ([`Limit`]), and what happens above them ([`Rule`]).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Extensions, HeaderMap, Method, Uri};

use super::policy::{FixedWindow, Gcra, SlidingLog, SlidingWindowCounter, TokenPool};
use super::policy::{LimitKey, Policy};
use super::store::{Keyed, KeyedLimiter};
use super::trust::{client_key, Trust};

/// The parts of a request the rules read: method, URI, headers (gRPC
/// metadata travels as HTTP/2 headers) and extensions (the peer address,
/// an authenticated user).
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The request URI (for gRPC, `/package.Service/Method`).
    pub uri: &'a Uri,
    /// Headers, and gRPC metadata.
    pub headers: &'a HeaderMap,
    /// Extensions set by the server or earlier layers.
    pub extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    /// The head of an HTTP request.
    pub fn of<B>(req: &'a axum::http::Request<B>) -> RequestHead<'a> {
        RequestHead {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The peer's address, from axum's `ConnectInfo<SocketAddr>`, tonic's
    /// `TcpConnectInfo`, or a [`PeerAddr`] extension.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        if let Some(PeerAddr(a)) = self.extensions.get::<PeerAddr>() {
            return Some(*a);
        }
        if let Some(c) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(c.0);
        }
        self.extensions
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(|c| c.remote_addr())
    }
}

/// The peer address of a request, for servers that record it themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The authenticated user of a request, set as an extension by an
/// authentication layer in front of the throttler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserId(pub String);

/// What an extractor found in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// The request's key.
    Key(String),
    /// A header present with an empty value: the key "" under
    /// [`MissingKey::Shared`] and [`MissingKey::Skip`], no key under
    /// [`MissingKey::Reject`].
    Empty,
    /// This request has no usable key (an absent or non-UTF-8 header, no
    /// authenticated user).
    Missing,
    /// No request on this server can have one: the server does not record
    /// what the extractor reads. The reason says how to fix it.
    Unavailable(&'static str),
}

type ExtractFn = dyn Fn(&RequestHead<'_>) -> Found + Send + Sync;

/// Maps a request to the key it is counted under.
///
/// Any valid UTF-8 value is a key. What a rule does with a request without
/// one (an absent or non-UTF-8 header, no authenticated user) is the
/// rule's [`MissingKey`] setting: by default such requests share one
/// bucket. A header sent empty is the key "" unless the rule rejects
/// requests without a key ([`MissingKey::Reject`]). An extractor that can find no key on this server at all (a peer
/// address on a server that records none) logs an error on its first
/// request and is handled the same way.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{Extract, RequestHead};
///
/// let req = axum::http::Request::builder()
///     .header("x-api-key", "clé-123")
///     .body(())?;
/// let head = RequestHead::of(&req);
/// assert_eq!(Extract::header("x-api-key").key(&head).as_deref(), Some("clé-123"));
/// assert_eq!(Extract::peer_ip().key(&head), None);
/// assert_eq!(Extract::global().key(&head).as_deref(), Some(""));
/// # Ok::<(), axum::http::Error>(())
/// ```
#[derive(Clone)]
pub struct Extract {
    name: Arc<str>,
    f: Arc<ExtractFn>,
}

/// Why a peer address is missing: the server does not record it.
const NO_PEER: &str = "the server records no peer address: serve the router with \
    `into_make_service_with_connect_info::<SocketAddr>()`, or set a `PeerAddr` extension";

impl Extract {
    /// A key computed by `f`; `None` is a request without a usable key.
    pub fn custom(
        name: impl Into<Arc<str>>,
        f: impl Fn(&RequestHead<'_>) -> Option<String> + Send + Sync + 'static,
    ) -> Extract {
        Extract::finding(name, move |h| f(h).map_or(Found::Missing, Found::Key))
    }

    fn finding(
        name: impl Into<Arc<str>>,
        f: impl Fn(&RequestHead<'_>) -> Found + Send + Sync + 'static,
    ) -> Extract {
        Extract {
            name: name.into(),
            f: Arc::new(f),
        }
    }

    /// The value of header `name`, any valid UTF-8 (absent or not UTF-8:
    /// no usable key). An empty value is the key "", except under
    /// [`MissingKey::Reject`], which refuses it as it refuses an absent
    /// header.
    pub fn header(name: &str) -> Extract {
        let header = name.to_ascii_lowercase();
        Extract::finding(format!("header:{header}"), move |h| {
            match h
                .headers
                .get(header.as_str())
                .map(|v| std::str::from_utf8(v.as_bytes()))
            {
                Some(Ok("")) => Found::Empty,
                Some(Ok(v)) => Found::Key(v.to_owned()),
                _ => Found::Missing,
            }
        })
    }

    /// The value of gRPC metadata entry `name` (text entries; gRPC sends
    /// metadata as HTTP/2 headers).
    pub fn grpc_metadata(name: &str) -> Extract {
        Extract::header(name)
    }

    /// The peer's IP address (see [`RequestHead::peer_addr`]). A server
    /// that records no peer address makes this an error, logged on the
    /// first request: serve an axum router with
    /// `into_make_service_with_connect_info::<SocketAddr>()`.
    pub fn peer_ip() -> Extract {
        Extract::finding("peer-ip", |h| match h.peer_addr() {
            Some(a) => Found::Key(a.ip().to_canonical().to_string()),
            None => Found::Unavailable(NO_PEER),
        })
    }

    /// The client's IP address behind proxies: the peer's address, unless
    /// the peer is one of the `trusted` proxies, in which case the address
    /// it forwarded (`Forwarded`, else `X-Forwarded-For`), walking back
    /// through trusted proxies only. A client cannot choose its key by
    /// sending these headers itself. Needs the peer address, as
    /// [`peer_ip`](Extract::peer_ip) does.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_throttle::{Extract, PeerAddr, RequestHead, Trust};
    ///
    /// let key = Extract::client_ip(Trust::networks(["10.0.0.0/8"])?);
    /// let mut req = axum::http::Request::builder()
    ///     .header("x-forwarded-for", "203.0.113.9, 198.51.100.4")
    ///     .body(())?;
    /// req.extensions_mut().insert(PeerAddr("10.0.0.1:443".parse()?));
    /// // The proxy at 10.0.0.1 says the request came from 198.51.100.4;
    /// // what that client wrote before it is not believed.
    /// assert_eq!(key.key(&RequestHead::of(&req)).as_deref(), Some("198.51.100.4"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_ip(trusted: Trust) -> Extract {
        Extract::finding(format!("client-ip:{trusted:?}"), move |h| {
            match h.peer_addr() {
                Some(a) => Found::Key(client_key(a.ip(), h.headers, &trusted)),
                None => Found::Unavailable(NO_PEER),
            }
        })
    }

    /// The [`UserId`] extension (none: no usable key).
    pub fn user_id() -> Extract {
        Extract::custom("user-id", |h| {
            h.extensions.get::<UserId>().map(|u| u.0.clone())
        })
    }

    /// One key for every request: a global limit.
    pub fn global() -> Extract {
        Extract::custom("global", |_| Some(String::new()))
    }

    /// The method and path, e.g. `GET /items` (a class for cost prediction).
    pub fn method_and_path() -> Extract {
        Extract::custom("method-path", |h| {
            Some(format!("{} {}", h.method, h.uri.path()))
        })
    }

    /// The key of `head`, if it has a usable one.
    pub fn key(&self, head: &RequestHead<'_>) -> Option<String> {
        match (self.f)(head) {
            Found::Key(k) => Some(k),
            Found::Empty => Some(String::new()),
            Found::Missing | Found::Unavailable(_) => None,
        }
    }

    pub(crate) fn find(&self, head: &RequestHead<'_>) -> Found {
        (self.f)(head)
    }
}

impl fmt::Debug for Extract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Extract").field(&self.name).finish()
    }
}

/// What a rule does with a request it finds no usable key for (see
/// [`Extract`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MissingKey {
    /// Such requests share one bucket under the rule's limits, apart from
    /// every key (the default): together they get what one key gets.
    /// A header sent with an empty value is the key "", a bucket of its
    /// own, limited like any other key.
    #[default]
    Shared,
    /// Such requests are rejected: HTTP 400 / gRPC `INVALID_ARGUMENT`.
    /// A header (or gRPC metadata entry) sent with an empty value is
    /// rejected too, so sending the header empty buys nothing.
    Reject,
    /// Such requests are not subject to the rule.
    ///
    /// A header sent with an empty value is not missing: it is the key
    /// "", limited like any other key.
    Skip,
}

/// Keys longer than this many bytes are kept as their digest.
pub(crate) const MAX_KEY_BYTES: usize = 64;

/// The key under which requests without one share a bucket: as long as a
/// digest, and not hexadecimal, so no key or digest equals it.
pub(crate) const SHARED_KEY: &str =
    "#****************************************************************";

/// The key as stored: itself when short, otherwise `#` and the hex SHA-256
/// of it (65 bytes, longer than any key kept as it is), so a key costs at
/// most [`MAX_KEY_BYTES`] + 1 bytes however long the client made it.
pub(crate) fn stored_key(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let mut out = String::with_capacity(1 + 2 * digest.as_ref().len());
    out.push('#');
    for b in digest.as_ref() {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// A limit per key: one of the policies.
#[derive(Debug, Clone)]
pub enum Limit {
    /// The core's token pool (rate, burst ratio).
    TokenPool(TokenPool),
    /// GCRA / leaky bucket with a bounded queue.
    Gcra(Gcra),
    /// A counter per aligned window.
    FixedWindow(FixedWindow),
    /// A log of times per key.
    SlidingLog(SlidingLog),
    /// Two weighted window counters.
    SlidingWindowCounter(SlidingWindowCounter),
}

impl Limit {
    /// What tells this limit apart from another on reload.
    fn key(&self) -> LimitKey {
        match self {
            Limit::TokenPool(p) => p.key(),
            Limit::Gcra(p) => p.key(),
            Limit::FixedWindow(p) => p.key(),
            Limit::SlidingLog(p) => p.key(),
            Limit::SlidingWindowCounter(p) => p.key(),
        }
    }

    /// Its quota, most cost and window.
    pub(crate) fn facts(&self) -> (u64, u64, u64) {
        fn of<P: Policy>(p: &P) -> (u64, u64, u64) {
            (p.quota(), p.max_cost(), p.window_ns())
        }
        match self {
            Limit::TokenPool(p) => of(p),
            Limit::Gcra(p) => of(p),
            Limit::FixedWindow(p) => of(p),
            Limit::SlidingLog(p) => of(p),
            Limit::SlidingWindowCounter(p) => of(p),
        }
    }

    /// This limit shared by `replicas` replicas deciding alone: its count
    /// (or rate, burst and queue) divided by them, at least 1.
    pub(crate) fn per_replica(self, replicas: u32) -> Limit {
        let r = u64::from(replicas.max(1));
        if r == 1 {
            return self;
        }
        let part = |n: u64| (n / r).max(1);
        match self {
            Limit::FixedWindow(p) => {
                FixedWindow::new(part(p.limit), Duration::from_nanos(p.window_ns))
                    .map(Limit::FixedWindow)
                    .unwrap_or(Limit::FixedWindow(p))
            }
            Limit::SlidingWindowCounter(p) => {
                SlidingWindowCounter::new(part(p.limit), Duration::from_nanos(p.window_ns))
                    .map(Limit::SlidingWindowCounter)
                    .unwrap_or(Limit::SlidingWindowCounter(p))
            }
            Limit::Gcra(p) => tollgate::RateSpec::new(p.nano_ops_per_sec as f64 / 1e9 / r as f64)
                .ok()
                .and_then(|rate| Gcra::new(rate, part(p.burst), p.queue / r).ok())
                .map(Limit::Gcra)
                .unwrap_or(Limit::Gcra(p)),
            Limit::TokenPool(p) => Limit::TokenPool(p.per_replica(r)),
            Limit::SlidingLog(p) => {
                SlidingLog::new(part(p.limit), Duration::from_nanos(p.window_ns))
                    .map(|l| Limit::SlidingLog(l.log_rejected(p.log_rejected)))
                    .unwrap_or(Limit::SlidingLog(p))
            }
        }
    }

    /// The limit over keys, timed by a clock moving in steps of
    /// `clock_step` (token pools widen to cover them).
    pub(crate) fn keyed(self, max_keys: usize, clock_step: Duration) -> Box<dyn Keyed> {
        match self {
            Limit::TokenPool(p) => Box::new(KeyedLimiter::<_, Box<str>>::new(
                p.with_clock_step(clock_step),
                max_keys,
            )),
            Limit::Gcra(p) => Box::new(KeyedLimiter::<_, Box<str>>::new(p, max_keys)),
            Limit::FixedWindow(p) => Box::new(KeyedLimiter::<_, Box<str>>::new(p, max_keys)),
            Limit::SlidingLog(p) => Box::new(KeyedLimiter::<_, Box<str>>::new(p, max_keys)),
            Limit::SlidingWindowCounter(p) => {
                Box::new(KeyedLimiter::<_, Box<str>>::new(p, max_keys))
            }
        }
    }
}

/// Whether a rule enforces its limits or only counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Rejections reject.
    #[default]
    Enforce,
    /// Dry run: decisions are made and counted in metrics, every request
    /// is admitted and nothing is charged for requests it would reject.
    Shadow,
}

/// One rule: a key, a hard limit, and optionally a soft limit, a ban and
/// shadow mode.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{Extract, FixedWindow, Limit, Rule};
/// use std::time::Duration;
///
/// let rule = Rule::new(
///     "per-api-key",
///     Extract::header("x-api-key"),
///     Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(60))?),
/// )
/// .soft(Limit::FixedWindow(FixedWindow::new(80, Duration::from_secs(60))?))
/// .ban(Duration::from_secs(3600));
/// assert_eq!(rule.name(), "per-api-key");
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) key: Extract,
    pub(crate) hard: Limit,
    pub(crate) soft: Option<Limit>,
    pub(crate) ban: Option<Duration>,
    pub(crate) mode: Mode,
    pub(crate) max_keys: usize,
    pub(crate) missing_key: MissingKey,
    pub(crate) headers: bool,
    /// Tokens a replica takes of a key per Redis call (0: one request's).
    pub(crate) slice: u64,
    pub(crate) slice_expiry: Duration,
}

impl Rule {
    /// The default cap on keys per rule.
    pub const DEFAULT_MAX_KEYS: usize = 100_000;

    /// How long a replica may spend a slice by default.
    pub const DEFAULT_SLICE_EXPIRY: Duration = Duration::from_millis(100);

    /// Requests with a key from `key` are limited by `hard`: above it they
    /// are rejected.
    pub fn new(name: impl Into<Arc<str>>, key: Extract, hard: Limit) -> Rule {
        Rule {
            name: name.into(),
            key,
            hard,
            soft: None,
            ban: None,
            mode: Mode::Enforce,
            max_keys: Rule::DEFAULT_MAX_KEYS,
            missing_key: MissingKey::Shared,
            headers: false,
            slice: 0,
            slice_expiry: Rule::DEFAULT_SLICE_EXPIRY,
        }
    }

    /// Tells clients this rule's quota and their standing under it in the
    /// `RateLimit-Policy` and `RateLimit` fields of every response to a
    /// request the rule applied to (default off; see
    /// [`ThrottleLayer`](super::ThrottleLayer)).
    pub fn ratelimit_headers(mut self, yes: bool) -> Rule {
        self.headers = yes;
        self
    }

    /// With a Redis store, lets each replica take up to `tokens` of a key's
    /// quota in the call that admits a request (its cost and what else
    /// fits) and admit later requests on the key from them, with no Redis
    /// call, until they run out, the [`slice_expiry`](Self::slice_expiry)
    /// passes or the window ends; what is left then goes back to Redis.
    /// Redis counts a slice spent when it is taken, so the replicas
    /// together never admit more than the limit; a hot key costs one Redis
    /// call per slice instead of one per request. Default 0: no slices.
    ///
    /// Only for an enforced fixed window or sliding window counter without
    /// a soft limit: a store refuses other rules with a slice (see
    /// [`RedisStore::supports_rule`](crate::RedisStore::supports_rule)). Without a store it changes nothing.
    ///
    /// Under a slice, the `remaining` a client is told is what Redis had
    /// left for every replica at this replica's latest take plus what is
    /// left of this replica's slice: other replicas may have spent some of
    /// the former since.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_throttle::{Extract, FixedWindow, Limit, Rule};
    ///
    /// let per_second = Limit::FixedWindow(FixedWindow::new(1000, Duration::from_secs(1))?);
    /// let rule = Rule::new("api", Extract::header("x-api-key"), per_second)
    ///     .slice(20)
    ///     .slice_expiry(Duration::from_millis(50));
    /// # let _ = rule;
    /// # Ok::<(), tollgate_throttle::ValueError>(())
    /// ```
    pub fn slice(mut self, tokens: u64) -> Rule {
        self.slice = tokens;
        self
    }

    /// How long a replica may spend a [`slice`](Self::slice) before it
    /// returns what is left (default [`Rule::DEFAULT_SLICE_EXPIRY`]; never
    /// past the end of the window it was taken in).
    pub fn slice_expiry(mut self, expiry: Duration) -> Rule {
        self.slice_expiry = expiry;
        self
    }

    /// What happens to a request without a usable key (default
    /// [`MissingKey::Shared`]).
    pub fn missing_key(mut self, missing: MissingKey) -> Rule {
        self.missing_key = missing;
        self
    }

    /// Above `soft` (but within the hard limit) requests are admitted with
    /// a warning. The soft limit counts only requests it admits.
    pub fn soft(mut self, soft: Limit) -> Rule {
        self.soft = Some(soft);
        self
    }

    /// A key rejected by the hard limit is then rejected outright until
    /// the limit would admit it again plus `duration`.
    pub fn ban(mut self, duration: Duration) -> Rule {
        self.ban = Some(duration);
        self
    }

    /// Enforce or only count.
    pub fn mode(mut self, mode: Mode) -> Rule {
        self.mode = mode;
        self
    }

    /// Keeps at most `max_keys` keys for this rule (per limit).
    pub fn max_keys(mut self, max_keys: usize) -> Rule {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The rule's name, used in metrics and rejections.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What tells this rule apart from another on reload.
    pub(crate) fn key(&self) -> RuleKey {
        RuleKey {
            name: self.name.clone(),
            extract: self.key.name.clone(),
            hard: self.hard.key(),
            soft: self.soft.as_ref().map(Limit::key),
            ban: self.ban,
            mode: self.mode,
            max_keys: self.max_keys,
            missing_key: self.missing_key,
            headers: self.headers,
            slice: (self.slice, self.slice_expiry),
        }
    }
}

/// A rule's identity across reloads: every setting of it, with the key
/// extractor by its name. A reloaded rule with the same identity as a
/// rule in force keeps that rule's keys and their state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RuleKey {
    name: Arc<str>,
    extract: Arc<str>,
    hard: LimitKey,
    soft: Option<LimitKey>,
    ban: Option<Duration>,
    mode: Mode,
    max_keys: usize,
    missing_key: MissingKey,
    headers: bool,
    slice: (u64, Duration),
}

#[cfg(test)]
mod tests;
