//! Whether a server can do its work now, for its health check: not while
//! a service it needs (etcd) is unreachable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Whether a server can do its work now. Clones share one state: the
/// server is ready while no outage recorded on any of them lasts.
///
/// # Examples
///
/// ```
/// let ready = tollgate_service::Readiness::default();
/// assert!(ready.is_ready());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    /// How many outages last now.
    outages: Arc<AtomicUsize>,
}

impl Readiness {
    /// Whether no outage lasts now.
    pub fn is_ready(&self) -> bool {
        // Relaxed: a count read for a health answer; no other memory
        // depends on it.
        self.outages.load(Ordering::Relaxed) == 0
    }

    /// Records an outage: not ready until the guard is dropped.
    pub fn not_ready(&self) -> NotReady {
        // Relaxed: as in `is_ready`.
        self.outages.fetch_add(1, Ordering::Relaxed);
        NotReady(self.clone())
    }
}

/// One outage that lasts; ends when dropped.
#[derive(Debug)]
pub struct NotReady(Readiness);

impl Drop for NotReady {
    fn drop(&mut self) {
        // Relaxed: as in `Readiness::is_ready`.
        self.0.outages.fetch_sub(1, Ordering::Relaxed);
    }
}
