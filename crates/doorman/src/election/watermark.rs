//! The masters' watermark: how long a new master's learning mode must
//! last, from a promise its predecessors keep beside the election.
//!
//! # Implementation notes
//!
//! Learning mode exists because a new master does not know what earlier
//! masters granted. The watermark bounds it. Before a master grants, it
//! stores `W = now + ahead` (at least the `W` it found), and renews it
//! while it is master; it never grants a lease that ends after the last
//! `W` the store acknowledged (the [`Promise`](super::Promise)). Every
//! master's leases therefore end by the stored `W`, on that master's
//! clock. A new master reads `W` before it grants anything, and:
//!
//! * finds none: no master ever granted (the election is empty), so it
//!   needs no learning mode (rule a);
//! * finds its own last write, unchanged (same writer, same revision): no
//!   one else was master since its own last term, so the leases it knew
//!   then are all there is, and it keeps them (rule c);
//! * otherwise learns until `W` plus the clock skew allowed between
//!   servers (rule b), and never longer than its templates' learning mode
//!   from its own start (the server caps it).
//!
//! A record it cannot read counts as unknown: learning mode in full. The
//! store's writes are conditional on the writer still holding the
//! election, so no write of an earlier master lands after a successor
//! read `W`.
//!
//! Masters of a version without the watermark store none: during an
//! upgrade from one, the first new master finds no record while an old
//! master's leases may still run, and must not be told the election is
//! empty; the record is only trusted once every candidate writes it.

use std::time::Duration;

use super::Mastership;
use crate::clock::Timestamp;

/// The stored watermark: every lease of every master so far ends by
/// `until`; `writer` wrote it last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Unix time, on the writer's clock.
    pub until: Timestamp,
    /// The writer's identity, unique per election instance (per process).
    pub writer: u64,
}

impl Record {
    /// The stored form: `"<until in ms> <writer in hex>"`.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn encode(&self) -> Vec<u8> {
        format!("{} {:x}", self.until.as_millis(), self.writer).into_bytes()
    }

    /// Reads [`Record::encode`]'s form; `None` for anything else.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        let s = std::str::from_utf8(bytes).ok()?;
        let (ms, writer) = s.split_once(' ')?;
        Some(Record {
            until: Duration::from_millis(ms.parse().ok()?),
            writer: u64::from_str_radix(writer, 16).ok()?,
        })
    }
}

/// What the store held when a candidate won: nothing, a record at a
/// revision, or something unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// No watermark: no master ever granted.
    Empty,
    /// A record, and the store's revision of its last write.
    Record(Record, i64),
    /// A value that is not a record.
    Unreadable,
}

/// The mastership a candidate publishes on winning: `me` is its identity,
/// `last_write` the revision of its own last acknowledged write, if any,
/// `skew` the clock skew allowed between servers. The promise is added
/// once the new watermark is stored.
pub fn won(
    address: Option<String>,
    found: Found,
    me: u64,
    last_write: Option<i64>,
    skew: Duration,
) -> Mastership {
    let m = Mastership::master(address);
    match found {
        Found::Empty => m.learning_until(Duration::ZERO),
        Found::Record(r, revision) if r.writer == me && last_write == Some(revision) => {
            m.keeping_leases()
        }
        Found::Record(r, _) => m.learning_until(r.until.saturating_add(skew)),
        Found::Unreadable => m,
    }
}

/// The watermark a master stores at `now`: `ahead` from now, never less
/// than what it found (an earlier master's leases may run longer).
pub fn next(found: Found, now: Timestamp, ahead: Duration) -> Timestamp {
    let floor = match found {
        Found::Record(r, _) => r.until,
        Found::Empty | Found::Unreadable => Duration::ZERO,
    };
    now.saturating_add(ahead).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn records_read_back_and_garbage_does_not() {
        let r = Record {
            until: Duration::from_millis(1_700_000_070_123),
            writer: 0xdead_beef,
        };
        assert_eq!(r.encode(), b"1700000070123 deadbeef");
        assert_eq!(Record::decode(&r.encode()), Some(r));
        assert_eq!(Record::decode(b"1700000070123"), None);
        assert_eq!(Record::decode(b"soon deadbeef"), None);
        assert_eq!(Record::decode(&[0xff, b' ', b'1']), None);
    }

    #[test]
    fn an_empty_election_needs_no_learning_mode() {
        let m = won(None, Found::Empty, 1, None, secs(1));
        assert_eq!(m.learning_until, Some(Duration::ZERO));
        assert!(!m.keeps_leases);
    }

    #[test]
    fn a_predecessor_s_watermark_bounds_learning_mode() {
        let r = Record {
            until: secs(170),
            writer: 2,
        };
        let m = won(None, Found::Record(r, 7), 1, Some(5), secs(1));
        assert_eq!((m.learning_until, m.keeps_leases), (Some(secs(171)), false));
    }

    #[test]
    fn only_an_untouched_own_record_keeps_the_leases() {
        let r = Record {
            until: secs(170),
            writer: 1,
        };
        let m = won(None, Found::Record(r, 7), 1, Some(7), secs(1));
        assert_eq!((m.learning_until, m.keeps_leases), (None, true));
        // Written again since (by a writer with the same identity after a
        // restart, or anyone): learn until the watermark.
        let m = won(None, Found::Record(r, 9), 1, Some(7), secs(1));
        assert_eq!((m.learning_until, m.keeps_leases), (Some(secs(171)), false));
        // A record of ours this instance never wrote (it knows no write).
        let m = won(None, Found::Record(r, 7), 1, None, secs(1));
        assert!(!m.keeps_leases);
    }

    #[test]
    fn an_unreadable_record_keeps_learning_mode_in_full() {
        let m = won(None, Found::Unreadable, 1, Some(7), secs(1));
        assert_eq!(m, Mastership::master(None));
    }

    #[test]
    fn the_watermark_never_moves_back() {
        let r = Record {
            until: secs(500),
            writer: 2,
        };
        assert_eq!(next(Found::Record(r, 3), secs(100), secs(70)), secs(500));
        assert_eq!(next(Found::Record(r, 3), secs(450), secs(70)), secs(520));
        assert_eq!(next(Found::Empty, secs(100), secs(70)), secs(170));
        assert_eq!(next(Found::Unreadable, secs(100), secs(70)), secs(170));
    }
}
