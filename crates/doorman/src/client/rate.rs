//! `RateResource`: a rate limiter whose rate is the leased capacity.
//!
//! # Implementation notes
//!
//! The client task calls a hook with every new capacity before publishing
//! it, and the hook applies it to the limiter at once, so the limiter never
//! runs on a rate the watch channel no longer shows.
//!
//! The limiter cannot run at 0 ops/s (its smallest rate is
//! [`RateSpec::MIN_OPS_PER_SEC`]), and a lease of 0 is common: a new client
//! in a fully leased resource, a pessimistic client in an outage. So a gate
//! sits in front of the limiter: a capacity below the smallest rate closes
//! it (and turns the limiter down to its smallest rate, so no time piles up
//! behind the gate), anything else opens it. A closed gate refuses
//! `try_acquire` and makes `acquire` wait for the channel to show a usable
//! capacity. An op that passed the gate just before it closed may still be
//! admitted at the old rate: at most one op per waiting caller.
//!
//! The limiter's backlog is capped (default 100 ms), so an idle resource
//! cannot save up time and then run above its lease: at most `cap x rate`
//! ops of burst.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::layer::Rejected;
use super::wants::{RateDemand, Smoothing};
use super::{Capacity, Client, ReleaseError, Resource, ResourceError, ResourceOptions, Wants};
use tollgate::{Clock, RateLimiter, RateSpec};

/// Options for a [`RateResource`].
#[derive(Debug, Clone)]
pub struct RateOptions {
    resource: ResourceOptions,
    estimate: Option<Smoothing>,
    max_backlog: Duration,
    clock: Option<Arc<dyn Clock>>,
}

/// Lets a shared clock drive a limiter.
#[derive(Debug)]
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    fn resolution_ns(&self) -> u64 {
        self.0.resolution_ns()
    }
}

impl RateOptions {
    /// Asks for a fixed `wants` (ops/s).
    pub fn new(resource: ResourceOptions) -> RateOptions {
        RateOptions {
            resource,
            estimate: None,
            max_backlog: Duration::from_millis(100),
            clock: None,
        }
    }

    /// The clock the limiter measures time with (default: the system
    /// clock). With one, the limiter runs without its filler thread, so a
    /// test driving a [`ManualClock`](tollgate::ManualClock) gets exact
    /// numbers. Lease expiry is not affected: that is the client's clock.
    pub fn limiter_clock(mut self, clock: Arc<dyn Clock>) -> RateOptions {
        self.clock = Some(clock);
        self
    }

    /// Estimates wants from the ops asked for (admitted, waited for or
    /// refused), starting from the resource's wants and smoothed by
    /// `smoothing`.
    pub fn estimate(mut self, smoothing: Smoothing) -> RateOptions {
        self.estimate = Some(smoothing);
        self
    }

    /// The cap on the limiter's backlog (default 100 ms).
    pub fn max_backlog(mut self, cap: Duration) -> RateOptions {
        self.max_backlog = cap;
        self
    }
}

/// A rate limiter fed by a Doorman lease.
///
/// # Examples
///
/// ```no_run
/// use tollgate_doorman::{Client, RateOptions, RateResource, ResourceOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::builder().server("127.0.0.1:15000").build()?;
/// let rate = RateResource::new(&client, "fair", RateOptions::new(ResourceOptions::new(100.0)))?;
/// for _ in 0..10 {
///     rate.acquire().await;
///     // ... one operation ...
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RateResource {
    resource: Resource,
    limiter: Arc<RateLimiter>,
    /// Whether the capacity is usable. Relaxed: the limiter synchronises
    /// its own rate; the flag only gates, and a stale read admits or
    /// refuses one op as if it came a moment earlier.
    open: Arc<AtomicBool>,
    demand: Option<Arc<RateDemand>>,
    rx: watch::Receiver<Capacity>,
}

fn spec(capacity: f64) -> RateSpec {
    let rate = capacity.clamp(RateSpec::MIN_OPS_PER_SEC, RateSpec::MAX_OPS_PER_SEC);
    // In range by the clamp; NaN never reaches here (leases are checked).
    RateSpec::new(rate).unwrap_or_else(|_| {
        RateSpec::new(RateSpec::MIN_OPS_PER_SEC).expect("the smallest rate is valid")
    })
}

fn usable(capacity: f64) -> bool {
    capacity >= RateSpec::MIN_OPS_PER_SEC
}

impl RateResource {
    /// Adds resource `id` to `client` and builds its limiter.
    ///
    /// # Errors
    ///
    /// As [`Client::resource`].
    pub fn new(
        client: &Client,
        id: impl Into<String>,
        options: RateOptions,
    ) -> Result<RateResource, ResourceError> {
        let mut builder =
            RateLimiter::builder(spec(RateSpec::MIN_OPS_PER_SEC)).max_backlog(options.max_backlog);
        if let Some(clock) = options.clock {
            builder = builder.clock(SharedClock(clock)).filler_thread(false);
        }
        let limiter = Arc::new(builder.build());
        let open = Arc::new(AtomicBool::new(false));
        let demand = options
            .estimate
            .map(|s| Arc::new(RateDemand::new(options.resource.wants(), s)));
        let wants = match &demand {
            Some(d) => Wants::Estimated(d.clone()),
            None => Wants::Fixed(options.resource.wants()),
        };
        let hook = {
            let limiter = limiter.clone();
            let open = open.clone();
            Box::new(move |capacity: f64| {
                limiter.apply(spec(capacity));
                open.store(usable(capacity), Ordering::Relaxed);
            })
        };
        let resource = client.register(id.into(), options.resource, wants, Some(hook))?;
        let rx = resource.watch();
        Ok(RateResource {
            resource,
            limiter,
            open,
            demand,
            rx,
        })
    }

    fn asked(&self, n: u64) {
        if let Some(d) = &self.demand {
            d.record(n);
        }
    }

    /// Takes one op if the lease allows it now; never waits.
    pub fn try_acquire(&self) -> bool {
        self.asked(1);
        self.open.load(Ordering::Relaxed) && self.limiter.try_acquire()
    }

    async fn wait_open(&self) {
        let mut rx = self.rx.clone();
        // The sender lives in our own resource, so this cannot fail while
        // `self` exists.
        let _ = rx.wait_for(|c| usable(c.capacity)).await;
    }

    /// Waits until one op may start; returns how late it starts.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future takes no capacity.
    pub async fn acquire(&self) -> Duration {
        self.asked(1);
        self.wait_open().await;
        self.limiter.acquire_async().await
    }

    /// Waits at most `max_wait` for one op.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when no capacity came within `max_wait` (nothing is
    /// taken).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future takes no capacity.
    pub async fn acquire_timeout(&self, max_wait: Duration) -> Result<Duration, Rejected> {
        self.asked(1);
        if self.open.load(Ordering::Relaxed) && self.limiter.try_acquire() {
            return Ok(Duration::ZERO);
        }
        let wait = async {
            self.wait_open().await;
            self.limiter.acquire_async().await
        };
        tokio::time::timeout(max_wait, wait)
            .await
            .map_err(|_| Rejected::new(self.resource.id(), max_wait))
    }

    /// The capacity in force (ops/s).
    pub fn capacity(&self) -> f64 {
        self.resource.capacity()
    }

    /// The lease state.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The limiter (for its [`stats`](RateLimiter::stats)).
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Sets fixed wants (ending any estimation).
    ///
    /// # Errors
    ///
    /// As [`Resource::set_wants`].
    pub fn set_wants(&self, wants: f64) -> Result<(), ResourceError> {
        self.resource.set_wants(wants)
    }

    /// Releases the lease and waits for the server to acknowledge it.
    ///
    /// # Errors
    ///
    /// As [`Resource::release`].
    pub async fn release(self) -> Result<(), ReleaseError> {
        self.resource.release().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_tiny_capacities_close_the_gate() {
        assert!(!usable(0.0));
        assert!(!usable(0.0005));
        assert!(usable(0.001));
        assert_eq!(spec(0.0).ops_per_sec(), RateSpec::MIN_OPS_PER_SEC);
        assert_eq!(spec(1e15).ops_per_sec(), RateSpec::MAX_OPS_PER_SEC);
        assert_eq!(spec(250.0).ops_per_sec(), 250.0);
    }
}
