//! A refused TLS handshake, logged at warn with rustls' reason and what
//! most likely fixes it, at most once a second (a misconfigured fleet
//! retrying must not flood the log): the lines held back are counted in
//! the next one.

use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::locks::LockUnpoisoned;

/// At most one log line per this long.
const EVERY: Duration = Duration::from_secs(1);

/// The log of one server's refused handshakes.
#[derive(Debug)]
pub(super) struct RefusedHandshakes {
    /// When the last line was logged, and the refusals held back since.
    last: Mutex<(Option<Instant>, u64)>,
}

impl RefusedHandshakes {
    pub(super) fn new() -> RefusedHandshakes {
        RefusedHandshakes {
            last: Mutex::new((None, 0)),
        }
    }

    /// Logs the handshake from `remote` that failed with `error`, unless a
    /// line was logged less than a second ago. A connection that failed
    /// for no TLS reason (closed or reset mid-handshake) is logged at debug.
    pub(super) fn record(&self, remote: SocketAddr, error: &io::Error) {
        let reason = error.to_string();
        let Some(fix) = crate::tls_failure::refused_client_fix(error) else {
            debug!(%remote, reason, "TLS handshake failed: closed");
            return;
        };
        let Some(held_back) = self.due(Instant::now()) else {
            return;
        };
        warn!(%remote, reason, fix, held_back, "TLS handshake refused");
    }

    /// Whether a refusal at `now` is logged: if so, how many were held
    /// back since the last line; if not, it is counted.
    fn due(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock_unpoisoned();
        if last
            .0
            .is_some_and(|at| now.saturating_duration_since(at) < EVERY)
        {
            last.1 += 1;
            return None;
        }
        last.0 = Some(now);
        Some(std::mem::take(&mut last.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_within_a_second_are_held_back_and_counted() {
        let log = RefusedHandshakes::new();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(log.due(t0), Some(0));
        assert_eq!(log.due(ms(10)), None);
        assert_eq!(log.due(ms(999)), None);
        assert_eq!(log.due(ms(1000)), Some(2));
        assert_eq!(log.due(ms(1500)), None);
        assert_eq!(log.due(ms(2500)), Some(1));
    }
}
