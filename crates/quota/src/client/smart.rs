//! The smart client: a local bucket that calls take from, refilled in bulk
//! from the quota service by a background task, off the request path.
//!
//! # Implementation notes
//!
//! The local bucket is one atomic counter of tokens on hand. A call takes
//! its tokens with a compare-exchange, or waits on a `Notify` for the next
//! refill (at most its max wait). The refill task wakes every `refresh`;
//! when the bucket holds fewer than `low_water` tokens it asks the service
//! for `batch` tokens, allowing the service to impose a wait of up to
//! `refresh`, sleeps that wait (the tokens are not usable before), and adds
//! them. An idle client therefore holds at most about one batch, and a busy
//! one fetches as fast as the service's rate allows.
//!
//! When the service cannot be reached, or has no bucket for the name, the
//! task adds `fallback_rate` times the time since its previous check instead: the design's
//! client-side default rate, used only while the service is away so that
//! the two never add up. When the service refuses (its rate is exhausted)
//! nothing is added.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};

use super::{Admit, AdmitFuture, AdmitSource, Admitted, Denied};
use crate::pb;
use crate::pb::quota_service_client::QuotaServiceClient;
use crate::status::Status;

/// Options of a [`SmartClient`].
#[derive(Debug, Clone, Copy)]
pub struct SmartOptions {
    batch: u64,
    low_water: u64,
    refresh: Duration,
    deadline: Duration,
    fallback_rate: f64,
    max_wait: Duration,
}

impl SmartOptions {
    /// Batches of `batch` tokens fetched when fewer than half a batch is on
    /// hand, checked every 50 ms with a 100 ms deadline; `fallback_rate`
    /// tokens per second while the service is away; calls wait at most 1 s.
    pub fn new(batch: u64, fallback_rate: f64) -> SmartOptions {
        let batch = batch.max(1);
        SmartOptions {
            batch,
            low_water: batch.div_ceil(2),
            refresh: Duration::from_millis(50),
            deadline: Duration::from_millis(100),
            fallback_rate: if fallback_rate.is_finite() {
                fallback_rate.max(0.0)
            } else {
                0.0
            },
            max_wait: Duration::from_secs(1),
        }
    }

    /// Fetch when fewer than `tokens` are on hand.
    #[must_use]
    pub fn low_water(mut self, tokens: u64) -> SmartOptions {
        self.low_water = tokens;
        self
    }

    /// How often the refill task checks the bucket.
    #[must_use]
    pub fn refresh(mut self, every: Duration) -> SmartOptions {
        self.refresh = every.max(Duration::from_millis(1));
        self
    }

    /// How long the refill task waits for the service's answer.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> SmartOptions {
        self.deadline = deadline;
        self
    }

    /// How long a call waits for tokens before it is refused.
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> SmartOptions {
        self.max_wait = max_wait;
        self
    }
}

#[derive(Debug)]
struct Shared {
    /// Tokens on hand. AcqRel on updates: a refill's Release pairs with the
    /// taker's Acquire; no other data is published through it, so this is
    /// belt and braces rather than a requirement.
    tokens: AtomicU64,
    /// Woken after every refill.
    refilled: Notify,
    /// Tokens fetched from the service (Relaxed: a counter).
    fetched: AtomicU64,
    /// Tokens added by the fallback rate (Relaxed: a counter).
    fallback: AtomicU64,
}

impl Shared {
    fn try_take(&self, n: u64) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(n))
            .is_ok()
    }

    fn add(&self, n: u64) {
        self.tokens.fetch_add(n, Ordering::AcqRel);
        self.refilled.notify_waiters();
    }
}

/// Takes tokens from a local bucket that a background task refills in bulk
/// from the quota service.
///
/// # Examples
///
/// ```no_run
/// use tollgate_quota::{Admit as _, SmartClient, SmartOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Fetch 100 tokens at a time; 50/s if the service is away.
/// let client = SmartClient::new("127.0.0.1:15100", "Pinky_TheBrain", "UserService", SmartOptions::new(100, 50.0))?;
/// client.admit(1).await?; // no network on this path
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SmartClient {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    max_wait: Duration,
}

impl Drop for SmartClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SmartClient {
    /// A client for `namespace:bucket` at `address`; starts the refill task
    /// (which fetches the first batch at once).
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
        options: SmartOptions,
    ) -> Result<SmartClient, tonic::transport::Error> {
        let uri = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let channel = Endpoint::from_shared(uri)?.tcp_nodelay(true).connect_lazy();
        Ok(SmartClient::with_channel(
            channel, namespace, bucket, options,
        ))
    }

    /// A client on an existing channel.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn with_channel(
        channel: Channel,
        namespace: &str,
        bucket: &str,
        options: SmartOptions,
    ) -> SmartClient {
        let shared = Arc::new(Shared {
            tokens: AtomicU64::new(0),
            refilled: Notify::new(),
            fetched: AtomicU64::new(0),
            fallback: AtomicU64::new(0),
        });
        let task = tokio::spawn(refill(
            Arc::clone(&shared),
            QuotaServiceClient::new(channel),
            namespace.to_owned(),
            bucket.to_owned(),
            options,
        ));
        SmartClient {
            shared,
            task,
            max_wait: options.max_wait,
        }
    }

    /// Tokens on hand now.
    pub fn available(&self) -> u64 {
        self.shared.tokens.load(Ordering::Acquire)
    }

    /// Tokens fetched from the service so far.
    pub fn fetched(&self) -> u64 {
        self.shared.fetched.load(Ordering::Relaxed)
    }

    /// Tokens added by the fallback rate so far.
    pub fn fallback_tokens(&self) -> u64 {
        self.shared.fallback.load(Ordering::Relaxed)
    }

    async fn admit_inner(&self, tokens: u64) -> Result<Admitted, Denied> {
        let start = tokio::time::Instant::now();
        let deadline = start + self.max_wait;
        loop {
            let notified = self.shared.refilled.notified();
            tokio::pin!(notified);
            // Registered before the check, so a refill in between wakes us.
            notified.as_mut().enable();
            if self.shared.try_take(tokens) {
                return Ok(Admitted {
                    source: AdmitSource::Local,
                    waited: start.elapsed(),
                });
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Denied::locally(self.max_wait));
            }
        }
    }
}

impl Admit for SmartClient {
    fn admit(&self, tokens: u64) -> AdmitFuture<'_> {
        Box::pin(self.admit_inner(tokens))
    }
}

/// The refill task.
async fn refill(
    shared: Arc<Shared>,
    mut client: QuotaServiceClient<Channel>,
    namespace: String,
    bucket: String,
    o: SmartOptions,
) {
    // The fractional fallback tokens not yet added.
    let mut fallback_carry = 0.0f64;
    let mut tick = tokio::time::interval(o.refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        // Time since the previous check: what the fallback rate earns when
        // the service is away (slow answers do not slow the fallback).
        let now = tokio::time::Instant::now();
        let elapsed = now - last;
        last = now;
        if shared.tokens.load(Ordering::Acquire) >= o.low_water {
            continue;
        }
        let req = pb::AllowRequest {
            namespace: namespace.clone(),
            bucket_name: bucket.clone(),
            tokens_requested: i64::try_from(o.batch).unwrap_or(i64::MAX),
            max_wait_millis_override: i64::try_from(o.refresh.as_millis()).unwrap_or(i64::MAX),
            max_wait_time_override: true,
        };
        let answer = tokio::time::timeout(o.deadline, client.allow(req)).await;
        let status = match &answer {
            Ok(Ok(resp)) => Some(Status::from(resp.get_ref().status())),
            _ => None,
        };
        match (status, answer) {
            (Some(Status::Ok), Ok(Ok(resp))) => {
                let resp = resp.into_inner();
                let wait = Duration::from_millis(u64::try_from(resp.wait_millis).unwrap_or(0));
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                let granted = u64::try_from(resp.tokens_granted).unwrap_or(0);
                shared.fetched.fetch_add(granted, Ordering::Relaxed);
                shared.add(granted);
            }
            (
                Some(
                    Status::RejectedTimeout
                    | Status::RejectedTooManyTokensRequested
                    | Status::RejectedTooManyBuckets,
                ),
                _,
            ) => {} // the service's rate is spent: nothing to add
            _ => {
                // Away, or no bucket: the client-side default rate.
                fallback_carry += o.fallback_rate * elapsed.as_secs_f64();
                let whole = fallback_carry.floor();
                fallback_carry -= whole;
                let n = whole as u64;
                if n > 0 {
                    shared.fallback.fetch_add(n, Ordering::Relaxed);
                    shared.add(n);
                }
            }
        }
    }
}
