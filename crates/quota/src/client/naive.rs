//! The naive client: one Allow per call under a deadline, and a local
//! fallback limiter when the service is slow, down, or has no bucket.
//!
//! # Implementation notes
//!
//! Every call asks the service with the configured deadline. `OK` sleeps
//! the wait the service imposed, then admits. A rejection for timeout, too
//! many tokens or too many buckets is final: the service spoke. Anything
//! else (deadline passed, transport error, `REJECTED_NO_BUCKET`,
//! `REJECTED_SERVER_ERROR`, an invalid request) falls back to a local
//! [`TokenBucket`] at the configured rate, as the design's "client-side
//! defaults".
//!
//! After `failure_threshold` consecutive failures to reach the service the
//! client stops asking for `retry_after` and uses the fallback alone, then
//! tries the service again (a simple circuit breaker), so a dead service
//! does not add its deadline to every call.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::{Admit, AdmitFuture, AdmitSource, Admitted, Denied, Granted};
use crate::pb;
use crate::pb::quota_service_client::QuotaServiceClient;
use crate::status::Status;
use tollgate::RateSpec;
use tollgate::{BucketSettings, TokenBucket};
use tollgate::{Clock, SystemClock};
use tollgate_service::LockUnpoisoned;

/// Options of a [`NaiveClient`].
#[derive(Debug, Clone)]
pub struct NaiveOptions {
    deadline: Duration,
    fallback: BucketSettings,
    failure_threshold: u32,
    retry_after: Duration,
    clock: Option<Arc<dyn Clock>>,
}

impl NaiveOptions {
    /// A 20 ms deadline, a fallback of `fallback_rate` with one second of
    /// burst and a max wait of 1 s, and a pause of 1 s after 5 consecutive
    /// failures.
    pub fn new(fallback_rate: RateSpec) -> NaiveOptions {
        NaiveOptions {
            deadline: Duration::from_millis(20),
            fallback: BucketSettings::new(fallback_rate)
                .max_wait(Duration::from_secs(1))
                .max_debt(Duration::from_secs(1)),
            failure_threshold: 5,
            retry_after: Duration::from_secs(1),
            clock: None,
        }
    }

    /// How long to wait for the service's answer.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> NaiveOptions {
        self.deadline = deadline;
        self
    }

    /// The fallback limiter's shape (its rate, burst and max wait).
    #[must_use]
    pub fn fallback(mut self, settings: BucketSettings) -> NaiveOptions {
        self.fallback = settings;
        self
    }

    /// Stop asking the service for `retry_after` after `threshold`
    /// consecutive failures (0: never stop).
    #[must_use]
    pub fn circuit(mut self, threshold: u32, retry_after: Duration) -> NaiveOptions {
        self.failure_threshold = threshold;
        self.retry_after = retry_after;
        self
    }

    /// The clock of the fallback limiter and the circuit (default: the
    /// system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> NaiveOptions {
        self.clock = Some(clock);
        self
    }
}

/// Asks the quota service before every call; falls back to a local limiter.
///
/// # Examples
///
/// ```no_run
/// use tollgate_quota::{Admit as _, NaiveClient, NaiveOptions, AdmitSource};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let options = NaiveOptions::new("100".parse()?); // 100/s if the service is away
/// let client = NaiveClient::new("127.0.0.1:15100", "Pinky_TheBrain", "UserService", options)?;
/// let admitted = client.admit(1).await?;
/// if admitted.source == AdmitSource::Fallback {
///     eprintln!("quota service unavailable: using the local limit");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct NaiveClient {
    client: QuotaServiceClient<Channel>,
    namespace: String,
    bucket: String,
    deadline: Duration,
    fallback: TokenBucket,
    clock: Arc<dyn Clock>,
    failure_threshold: u32,
    retry_after: Duration,
    /// Consecutive failures to reach the service.
    failures: AtomicU32,
    /// Clock reading before which the service is not asked.
    open_until: Mutex<u64>,
    /// Calls that could not reach the service in time (Relaxed: counters).
    timeouts: AtomicU64,
    /// Calls admitted by the fallback limiter (Relaxed: counters).
    fallbacks: AtomicU64,
}

impl NaiveClient {
    /// A client for the bucket `namespace:bucket` of the server at `address`
    /// (`host:port` or a URI). Connects lazily.
    ///
    /// # Errors
    ///
    /// If `address` is not a valid URI.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new(
        address: &str,
        namespace: &str,
        bucket: &str,
        options: NaiveOptions,
    ) -> Result<NaiveClient, tonic::transport::Error> {
        let uri = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let channel = Endpoint::from_shared(uri)?.tcp_nodelay(true).connect_lazy();
        Ok(NaiveClient::with_channel(
            channel, namespace, bucket, options,
        ))
    }

    /// A client on an existing channel.
    pub fn with_channel(
        channel: Channel,
        namespace: &str,
        bucket: &str,
        options: NaiveOptions,
    ) -> NaiveClient {
        let clock = options
            .clock
            .unwrap_or_else(|| Arc::new(SystemClock::new()));
        NaiveClient {
            client: QuotaServiceClient::new(channel),
            namespace: namespace.to_owned(),
            bucket: bucket.to_owned(),
            deadline: options.deadline,
            fallback: TokenBucket::with_clock(options.fallback, Arc::clone(&clock)),
            clock,
            failure_threshold: options.failure_threshold,
            retry_after: options.retry_after,
            failures: AtomicU32::new(0),
            open_until: Mutex::new(0),
            timeouts: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Calls that failed to reach the service within the deadline.
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// Calls admitted by the fallback limiter.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    fn circuit_open(&self) -> bool {
        let until = *self.open_until.lock_unpoisoned();
        self.clock.now_ns() < until
    }

    fn failed(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if self.failure_threshold > 0 && n >= self.failure_threshold {
            let retry = u64::try_from(self.retry_after.as_nanos()).unwrap_or(u64::MAX);
            *self.open_until.lock_unpoisoned() = self.clock.now_ns().saturating_add(retry);
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Asks the service; `None` when the fallback should decide.
    async fn ask(&self, tokens: u64) -> Option<Result<Granted, Denied>> {
        if self.circuit_open() {
            return None;
        }
        let req = pb::AllowRequest {
            namespace: self.namespace.clone(),
            bucket_name: self.bucket.clone(),
            tokens_requested: i64::try_from(tokens).unwrap_or(i64::MAX),
            max_wait_millis_override: 0,
            max_wait_time_override: false,
        };
        let mut client = self.client.clone();
        let resp = match tokio::time::timeout(self.deadline, client.allow(req)).await {
            Ok(Ok(resp)) => resp.into_inner(),
            Ok(Err(_)) | Err(_) => {
                self.failed();
                return None;
            }
        };
        self.failures.store(0, Ordering::Relaxed);
        match Status::from(resp.status()) {
            Status::Ok => {
                let wait = Duration::from_millis(u64::try_from(resp.wait_millis).unwrap_or(0));
                Some(Ok(Granted {
                    source: AdmitSource::Service,
                    wait,
                }))
            }
            s @ (Status::RejectedTimeout
            | Status::RejectedTooManyTokensRequested
            | Status::RejectedTooManyBuckets) => Some(Err(Denied::by_service(s))),
            Status::RejectedNoBucket
            | Status::RejectedInvalidRequest
            | Status::RejectedServerError => None,
        }
    }

    /// Takes `tokens` without waiting: the service's answer (or the
    /// fallback's) with the wait the caller must honour before using them.
    /// [`admit`](Admit::admit) is this followed by a sleep of that wait;
    /// callers that schedule their own work (or wait in their own way, as
    /// the Python bindings do) take the wait instead.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_quota::{NaiveClient, NaiveOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = NaiveClient::new("127.0.0.1:15100", "one", "b", NaiveOptions::new("100".parse()?))?;
    /// let granted = client.allow(1).await?;
    /// tokio::time::sleep(granted.wait).await; // the wait to honour
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Denied`] when the service refuses for good (timeout, too many
    /// tokens or buckets), or the fallback has no tokens within its max wait.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives up the call; tokens the service already
    /// granted are not returned.
    pub async fn allow(&self, tokens: u64) -> Result<Granted, Denied> {
        if let Some(answer) = self.ask(tokens).await {
            return answer;
        }
        match self.fallback.reserve(tokens) {
            Ok(wait) => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                Ok(Granted {
                    source: AdmitSource::Fallback,
                    wait,
                })
            }
            Err(e) => Err(Denied::locally(e.limit())),
        }
    }

    async fn admit_inner(&self, tokens: u64) -> Result<Admitted, Denied> {
        let granted = self.allow(tokens).await?;
        if !granted.wait.is_zero() {
            tokio::time::sleep(granted.wait).await;
        }
        Ok(Admitted {
            source: granted.source,
            waited: granted.wait,
        })
    }
}

impl Admit for NaiveClient {
    fn admit(&self, tokens: u64) -> AdmitFuture<'_> {
        Box::pin(self.admit_inner(tokens))
    }
}
