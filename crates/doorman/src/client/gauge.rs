//! `GaugeResource`: a cap on operations in flight, set by a Doorman lease.
//!
//! # Implementation notes
//!
//! The leased capacity, rounded down, is the number of operations that may
//! be in flight (a lease of 2.7 allows 2). `in_flight` counts marked
//! operations; a mark is a compare-and-swap that succeeds only below the
//! limit, so the count never exceeds a limit in force when it was taken. A
//! lease that shrinks below the current count admits nothing until enough
//! guards drop. Waiters park on a [`Notify`]: a dropped guard wakes one,
//! a raised limit wakes all. Wants are estimated from the peak of
//! in-flight plus waiting operations between refreshes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::wants::{GaugeDemand, Smoothing, WantsEstimate};
use super::{Client, ReleaseError, Resource, ResourceError, ResourceOptions, Wants};

#[derive(Debug)]
struct Gauge {
    /// Operations that may be in flight. Relaxed: a plain value; waiters
    /// learn of changes through `notify`.
    limit: AtomicU64,
    /// Operations in flight. Only read-modify-writes change it, so they
    /// see one order without fences; Relaxed, as nothing else is published
    /// through it.
    in_flight: AtomicU64,
    /// Callers waiting in `mark` (for the wants estimate). Relaxed: a
    /// statistic.
    waiting: AtomicU64,
    notify: Notify,
    demand: Option<GaugeDemand>,
}

impl Gauge {
    fn try_take(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut cur = self.in_flight.load(Ordering::Relaxed);
        loop {
            if cur >= limit {
                return false;
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.observe(cur + 1);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    fn observe(&self, in_flight: u64) {
        if let Some(d) = &self.demand {
            d.observe(in_flight + self.waiting.load(Ordering::Relaxed));
        }
    }

    fn put_back(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.notify.notify_one();
    }

    fn set_limit(&self, capacity: f64) {
        // `as` saturates: a huge capacity becomes u64::MAX, 0 stays 0.
        self.limit.store(capacity.floor() as u64, Ordering::Relaxed);
        self.notify.notify_waiters();
    }
}

/// Samples a gauge's wants.
#[derive(Debug)]
struct Sampler(Arc<Gauge>);

impl WantsEstimate for Sampler {
    fn wants(&self, now: Duration) -> f64 {
        let g = &self.0;
        let current = g.in_flight.load(Ordering::Relaxed) + g.waiting.load(Ordering::Relaxed);
        g.demand
            .as_ref()
            .map_or(0.0, |d| d.wants_with(now, current))
    }
}

/// A cap on operations in flight, following a Doorman lease.
///
/// # Examples
///
/// ```no_run
/// use tollgate_doorman::{Client, GaugeResource, ResourceOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::builder().server("127.0.0.1:15000").build()?;
/// let gauge = GaugeResource::new(&client, "db-connections", ResourceOptions::new(8.0), None)?;
/// {
///     let _in_flight = gauge.mark().await;
///     // ... the transaction ...
/// } // released here
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct GaugeResource {
    resource: Resource,
    gauge: Arc<Gauge>,
}

/// One operation in flight; dropping it ends the operation.
#[derive(Debug)]
#[must_use = "the operation ends when the guard is dropped"]
pub struct GaugeGuard {
    gauge: Arc<Gauge>,
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.gauge.put_back();
    }
}

/// Counts a caller as waiting while it lives.
struct Waiting<'a>(&'a Gauge);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl GaugeResource {
    /// Adds resource `id` to `client`. With `estimate`, wants follow the
    /// observed concurrency (starting from the options' wants).
    ///
    /// # Errors
    ///
    /// As [`Client::resource`].
    pub fn new(
        client: &Client,
        id: impl Into<String>,
        options: ResourceOptions,
        estimate: Option<Smoothing>,
    ) -> Result<GaugeResource, ResourceError> {
        let gauge = Arc::new(Gauge {
            limit: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            notify: Notify::new(),
            demand: estimate.map(|s| GaugeDemand::new(options.wants(), s)),
        });
        let wants = if gauge.demand.is_some() {
            Wants::Estimated(Arc::new(Sampler(gauge.clone())))
        } else {
            Wants::Fixed(options.wants())
        };
        let hook = {
            let gauge = gauge.clone();
            Box::new(move |capacity: f64| gauge.set_limit(capacity))
        };
        let resource = client.register(id.into(), options, wants, Some(hook))?;
        Ok(GaugeResource { resource, gauge })
    }

    /// Starts an operation if one more may be in flight now.
    pub fn try_mark(&self) -> Option<GaugeGuard> {
        if self.gauge.try_take() {
            Some(GaugeGuard {
                gauge: self.gauge.clone(),
            })
        } else {
            self.gauge
                .observe(self.gauge.in_flight.load(Ordering::Relaxed) + 1);
            None
        }
    }

    /// Waits until an operation may start.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled wait takes nothing, and a wake-up it had
    /// received passes to the next waiter.
    pub async fn mark(&self) -> GaugeGuard {
        let g = &*self.gauge;
        g.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(g);
        loop {
            let notified = g.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a guard dropped between the
            // check and the await still wakes us.
            notified.as_mut().enable();
            if g.try_take() {
                return GaugeGuard {
                    gauge: self.gauge.clone(),
                };
            }
            g.observe(g.in_flight.load(Ordering::Relaxed));
            notified.await;
        }
    }

    /// Operations in flight now.
    pub fn in_flight(&self) -> u64 {
        self.gauge.in_flight.load(Ordering::Relaxed)
    }

    /// Operations that may be in flight now.
    pub fn limit(&self) -> u64 {
        self.gauge.limit.load(Ordering::Relaxed)
    }

    /// The lease state.
    pub fn resource(&self) -> &Resource {
        &self.resource
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
