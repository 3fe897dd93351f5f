//! The idle-bucket reaper: a background task that removes buckets unused
//! for longer than their `max_idle_millis`, so that memory follows the
//! buckets in use rather than every name ever seen.

use std::sync::Arc;
use std::time::Duration;

use super::service::Quota;

/// Spawns a task on the current tokio runtime that calls [`Quota::reap`]
/// every `every` until the returned handle is aborted or the runtime stops.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn(quota: Arc<Quota>, every: Duration) -> tokio::task::JoinHandle<()> {
    let every = every.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let removed = quota.reap();
            if removed > 0 {
                tracing::debug!(removed, "reaped idle quota buckets");
            }
        }
    })
}
