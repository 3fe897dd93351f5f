//! When the callers of `tollgate pace` stall.

use std::time::Duration;

/// When the callers stall: once at `at`, and/or every `every`, for `length`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stalls {
    pub(super) at: Option<Duration>,
    pub(super) every: Option<Duration>,
    pub(super) length: Duration,
}

impl Stalls {
    pub(super) fn stalled(&self, t: Duration) -> bool {
        let once = self.at.is_some_and(|at| t >= at && t < at + self.length);
        let periodic = self.every.is_some_and(|every| {
            t >= every && t.as_nanos() % every.as_nanos() < self.length.as_nanos()
        });
        once || periodic
    }

    /// The first time after `t` at which [`Stalls::stalled`] may change.
    pub(super) fn next_change(&self, t: Duration) -> Option<Duration> {
        let mut candidates = Vec::with_capacity(4);
        if let Some(at) = self.at {
            candidates.extend([at, at + self.length]);
        }
        if let Some(every) = self.every {
            let k = u32::try_from(t.as_nanos() / every.as_nanos()).unwrap_or(u32::MAX);
            let start = every * k.max(1);
            candidates.extend([start, start + self.length, every * k.saturating_add(1)]);
        }
        candidates.into_iter().filter(|&c| c > t).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn one_stall() {
        let s = Stalls {
            at: Some(1000 * MS),
            every: None,
            length: 500 * MS,
        };
        assert!(!s.stalled(999 * MS));
        assert!(s.stalled(1000 * MS));
        assert!(s.stalled(1499 * MS));
        assert!(!s.stalled(1500 * MS));
        assert_eq!(s.next_change(Duration::ZERO), Some(1000 * MS));
        assert_eq!(s.next_change(1000 * MS), Some(1500 * MS));
        assert_eq!(s.next_change(1500 * MS), None);
    }

    #[test]
    fn periodic_stalls() {
        let s = Stalls {
            at: None,
            every: Some(1000 * MS),
            length: 100 * MS,
        };
        assert!(!s.stalled(50 * MS), "no stall at the very start");
        assert!(s.stalled(1000 * MS));
        assert!(s.stalled(2050 * MS));
        assert!(!s.stalled(2100 * MS));
        assert_eq!(s.next_change(50 * MS), Some(1000 * MS));
        assert_eq!(s.next_change(1000 * MS), Some(1100 * MS));
        assert_eq!(s.next_change(1100 * MS), Some(2000 * MS));
    }
}
