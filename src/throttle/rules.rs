//! Rules: which key a request is counted under ([`Extract`]), the limits
//! applied to it ([`Limit`]), and what happens above them ([`Rule`]).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Extensions, HeaderMap, Method, Uri};

use super::policy::Policy;
use super::store::{BanCheck, KeyedLimiter};
use super::{FixedWindow, Gcra, SlidingLog, SlidingWindowCounter, TokenPool};

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

type ExtractFn = dyn Fn(&RequestHead<'_>) -> Option<String> + Send + Sync;

/// Maps a request to the key it is counted under; a request without a key
/// is not subject to the rule.
///
/// # Examples
///
/// ```
/// use tollgate::throttle::{Extract, RequestHead};
///
/// let req = axum::http::Request::builder()
///     .header("x-api-key", "k-123")
///     .body(())?;
/// let head = RequestHead::of(&req);
/// assert_eq!(Extract::header("x-api-key").key(&head).as_deref(), Some("k-123"));
/// assert_eq!(Extract::peer_ip().key(&head), None);
/// assert_eq!(Extract::global().key(&head).as_deref(), Some(""));
/// # Ok::<(), axum::http::Error>(())
/// ```
#[derive(Clone)]
pub struct Extract {
    name: Arc<str>,
    f: Arc<ExtractFn>,
}

impl Extract {
    /// A key computed by `f`.
    pub fn custom(
        name: impl Into<Arc<str>>,
        f: impl Fn(&RequestHead<'_>) -> Option<String> + Send + Sync + 'static,
    ) -> Extract {
        Extract {
            name: name.into(),
            f: Arc::new(f),
        }
    }

    /// The value of header `name` (absent or not text: no key).
    pub fn header(name: &str) -> Extract {
        let header = name.to_ascii_lowercase();
        Extract::custom(format!("header:{header}"), move |h| {
            h.headers
                .get(header.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
    }

    /// The value of gRPC metadata entry `name` (text entries; gRPC sends
    /// metadata as HTTP/2 headers).
    pub fn grpc_metadata(name: &str) -> Extract {
        Extract::header(name)
    }

    /// The peer's IP address (see [`RequestHead::peer_addr`]).
    pub fn peer_ip() -> Extract {
        Extract::custom("peer-ip", |h| h.peer_addr().map(|a| a.ip().to_string()))
    }

    /// The [`UserId`] extension.
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

    /// The key of `head`, if the rule applies to it.
    pub fn key(&self, head: &RequestHead<'_>) -> Option<String> {
        (self.f)(head)
    }
}

impl fmt::Debug for Extract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Extract").field(&self.name).finish()
    }
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

/// A keyed limiter of any policy, behind one object-safe face.
pub(crate) trait Keyed: Send + Sync + fmt::Debug {
    fn check(&self, key: &str, now_ns: u64, cost: u64, ban_ns: Option<u64>) -> BanCheck;
    fn settle(&self, key: &str, now_ns: u64, delta: i64);
    fn quota(&self) -> u64;
    fn max_cost(&self) -> u64;
    fn len(&self) -> usize;
    fn banned(&self, now_ns: u64) -> usize;
    fn sweep(&self, now_ns: u64);
}

impl<P: Policy> Keyed for KeyedLimiter<P, Box<str>> {
    fn check(&self, key: &str, now_ns: u64, cost: u64, ban_ns: Option<u64>) -> BanCheck {
        match ban_ns {
            Some(ban) => self.check_with_ban(key, now_ns, cost, ban),
            None => BanCheck {
                verdict: KeyedLimiter::check(self, key, now_ns, cost),
                banned: false,
                ban_started: false,
            },
        }
    }
    fn settle(&self, key: &str, now_ns: u64, delta: i64) {
        KeyedLimiter::settle(self, key, now_ns, delta)
    }
    fn quota(&self) -> u64 {
        self.policy().quota()
    }
    fn max_cost(&self) -> u64 {
        self.policy().max_cost()
    }
    fn len(&self) -> usize {
        KeyedLimiter::len(self)
    }
    fn banned(&self, now_ns: u64) -> usize {
        KeyedLimiter::banned(self, now_ns)
    }
    fn sweep(&self, now_ns: u64) {
        KeyedLimiter::sweep(self, now_ns)
    }
}

/// Whether a rule enforces its limits or only counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
/// use tollgate::throttle::{Extract, FixedWindow, Limit, Rule};
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
/// # Ok::<(), tollgate::throttle::LimitError>(())
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
}

impl Rule {
    /// The default cap on keys per rule.
    pub const DEFAULT_MAX_KEYS: usize = 100_000;

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
        }
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
}

/// A rule with its keyed state.
#[derive(Debug)]
pub(crate) struct LiveRule {
    /// The rule's configuration as text, to recognise it on reload.
    pub(crate) fingerprint: String,
    pub(crate) name: Arc<str>,
    pub(crate) key: Extract,
    pub(crate) hard: Box<dyn Keyed>,
    pub(crate) soft: Option<Box<dyn Keyed>>,
    pub(crate) ban_ns: Option<u64>,
    pub(crate) mode: Mode,
}

impl LiveRule {
    pub(crate) fn new(rule: Rule, clock_step: Duration) -> LiveRule {
        LiveRule {
            fingerprint: format!("{rule:?}"),
            name: rule.name,
            key: rule.key,
            hard: rule.hard.keyed(rule.max_keys, clock_step),
            soft: rule.soft.map(|s| s.keyed(rule.max_keys, clock_step)),
            ban_ns: rule
                .ban
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            mode: rule.mode,
        }
    }
}
