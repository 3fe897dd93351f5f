//! One live bucket: its token bucket, the configuration it follows, its
//! idle limit, the demand on it and its namespace's counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::TokenBucket;

use super::lookup::BucketKind;
use crate::metrics::QuotaMetrics;

/// One live bucket.
#[derive(Debug)]
pub(crate) struct LiveBucket {
    bucket: TokenBucket,
    kind: BucketKind,
    /// The configured max idle in ms; `u64::MAX`: never reaped. Updated by
    /// reloads (Relaxed: a plain value read by the reaper, which tolerates a
    /// stale one for one sweep).
    max_idle_ms: AtomicU64,
    /// Tokens asked for, granted or not (Relaxed: a counter read by the
    /// cluster task to measure demand).
    demand: AtomicU64,
    /// Its namespace's counters, resolved once rather than per request.
    pub(crate) counters: SlotCounters,
}

/// The counters an Allow on one bucket updates, labelled by its namespace.
#[derive(Debug)]
pub(crate) struct SlotCounters {
    pub(crate) served_now: prometheus::Counter,
    pub(crate) served_after_wait: prometheus::Counter,
    pub(crate) tokens: prometheus::Counter,
    pub(crate) timeouts: prometheus::Counter,
}

impl SlotCounters {
    pub(super) fn new(metrics: &QuotaMetrics, namespace: &str) -> SlotCounters {
        SlotCounters {
            served_now: metrics.served.with_label_values(&[namespace, "false"]),
            served_after_wait: metrics.served.with_label_values(&[namespace, "true"]),
            tokens: metrics.tokens_served.with_label_values(&[namespace]),
            timeouts: metrics.timeouts.with_label_values(&[namespace]),
        }
    }
}

impl LiveBucket {
    /// A bucket of `kind` that never idles out until told its max idle
    /// time, with no demand yet.
    pub(super) fn new(bucket: TokenBucket, kind: BucketKind, counters: SlotCounters) -> LiveBucket {
        LiveBucket {
            bucket,
            kind,
            max_idle_ms: AtomicU64::new(u64::MAX),
            demand: AtomicU64::new(0),
            counters,
        }
    }

    /// Tokens asked for so far.
    pub(super) fn demand(&self) -> u64 {
        // Relaxed: see the field.
        self.demand.load(Ordering::Relaxed)
    }

    /// Counts `tokens` asked for.
    pub(crate) fn record_demand(&self, tokens: u64) {
        self.demand.fetch_add(tokens, Ordering::Relaxed);
    }

    /// The bucket.
    pub(crate) fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }

    /// Which configuration it follows.
    pub(crate) fn kind(&self) -> BucketKind {
        self.kind
    }

    pub(super) fn set_max_idle(&self, max_idle: Option<Duration>) {
        let ms = max_idle.map_or(u64::MAX, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        });
        self.max_idle_ms.store(ms, Ordering::Relaxed);
    }

    pub(super) fn is_idle(&self) -> bool {
        // Relaxed: see the field.
        let ms = self.max_idle_ms.load(Ordering::Relaxed);
        ms != u64::MAX && self.bucket.idle() >= Duration::from_millis(ms)
    }
}
