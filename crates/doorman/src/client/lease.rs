//! Leases as the client sees them: what a server's answer means once checked,
//! and which capacity to enforce at a given moment.
//!
//! # Implementation notes
//!
//! Everything here is pure: time comes in as arguments (Unix time from the
//! client's [`WallClock`](crate::WallClock)), so the rules for bad
//! input and for lease expiry are tested with exact numbers.
//!
//! A server's answer for one resource is checked field by field. Anything
//! that cannot describe a usable lease (no `gets` or an `expiry_time` of 0
//! or less, a capacity that is NaN,
//! infinite or negative) is refused as a whole and the previous lease stays
//! in force until it expires; smaller faults are repaired (a refresh interval
//! below one second becomes the client's minimum, an unusable
//! `safe_capacity` is dropped). An expiry at or before the client's "now"
//! is accepted but the lease counts as expired at once, so the resource's
//! [`ExpiryMode`] governs it. Every such case is logged by the caller.

use std::fmt;
use std::time::Duration;

use crate::lease::{Lease, Timestamp};
use crate::pb;

/// What a client does with a resource whose lease has expired, or before it
/// has had one, while it cannot get a lease from the server.
///
/// The mode takes effect only while no valid lease is held; as soon as the
/// server answers again its grant is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryMode {
    /// Behave as if all of `wants` had been granted: keeps a user-facing
    /// service running, at the risk of overusing the resource.
    Optimistic,
    /// Behave as if 0 had been granted: stop using the resource.
    Pessimistic,
    /// Use the `safe_capacity` the server sent with its last answer (0 when
    /// it never sent one). The default: the server's wish for an outage.
    #[default]
    Safe,
}

/// Parses the mode's lowercase name.
///
/// # Examples
///
/// ```
/// use tollgate_doorman::ExpiryMode;
///
/// assert_eq!("pessimistic".parse::<ExpiryMode>()?, ExpiryMode::Pessimistic);
/// let e = "hopeful".parse::<ExpiryMode>().unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "unknown expiry mode \"hopeful\" (optimistic, pessimistic or safe)"
/// );
/// # Ok::<(), tollgate_doorman::ParseExpiryModeError>(())
/// ```
///
/// # Errors
///
/// [`ParseExpiryModeError`] for any other text.
impl std::str::FromStr for ExpiryMode {
    type Err = ParseExpiryModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "optimistic" => Ok(ExpiryMode::Optimistic),
            "pessimistic" => Ok(ExpiryMode::Pessimistic),
            "safe" => Ok(ExpiryMode::Safe),
            _ => Err(ParseExpiryModeError { text: s.to_owned() }),
        }
    }
}

/// Text that names no [`ExpiryMode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseExpiryModeError {
    text: String,
}

impl ParseExpiryModeError {
    /// The text that was refused.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ParseExpiryModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown expiry mode {:?} (optimistic, pessimistic or safe)",
            self.text
        )
    }
}

/// A refused name has no underlying cause: `source()` is `None`.
impl std::error::Error for ParseExpiryModeError {}

impl Lease {
    /// The lease as sent back in `has`.
    pub(crate) fn to_pb(self) -> pb::Lease {
        pb::Lease {
            expiry_time: pb::to_wire_secs(self.expiry),
            refresh_interval: pb::to_wire_secs(self.refresh_interval),
            capacity: self.capacity,
        }
    }
}

/// Where the capacity in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// No answer from the server yet: the [`ExpiryMode`] applies.
    Pending,
    /// An unexpired lease.
    Lease,
    /// The lease expired without being renewed: the [`ExpiryMode`] applies.
    Expired,
}

impl fmt::Display for CapacitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CapacitySource::Pending => "pending",
            CapacitySource::Lease => "lease",
            CapacitySource::Expired => "expired",
        })
    }
}

/// The capacity a resource may use now, as published on its watch channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// The capacity to enforce (finite, `>= 0`).
    pub capacity: f64,
    /// Why this is the capacity.
    pub source: CapacitySource,
    /// The last lease the server granted, even if expired.
    pub lease: Option<Lease>,
    /// The last `safe_capacity` the server sent.
    pub safe_capacity: Option<f64>,
    /// How many answers from the server this resource has had.
    pub refreshes: u64,
}

impl Capacity {
    /// The state of a resource the server has not answered for yet.
    pub(crate) fn pending(mode: ExpiryMode, wants: f64) -> Capacity {
        Capacity {
            capacity: fallback(mode, wants, None),
            source: CapacitySource::Pending,
            lease: None,
            safe_capacity: None,
            refreshes: 0,
        }
    }
}

/// The capacity `mode` gives while no lease is in force.
pub(crate) fn fallback(mode: ExpiryMode, wants: f64, safe: Option<f64>) -> f64 {
    match mode {
        ExpiryMode::Optimistic => wants,
        ExpiryMode::Pessimistic => 0.0,
        ExpiryMode::Safe => safe.unwrap_or(0.0),
    }
}

/// Why an answer for one resource was refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refused {
    /// `gets` is missing.
    NoLease,
    /// The granted capacity is NaN, infinite or negative.
    BadCapacity(f64),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NoLease => {
                f.write_str("response has no lease (gets missing or expiry_time <= 0)")
            }
            Refused::BadCapacity(c) => {
                write!(f, "granted capacity {c} is not a finite number >= 0")
            }
        }
    }
}

/// A checked answer for one resource, with the repairs made to it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checked {
    pub(crate) lease: Lease,
    pub(crate) safe_capacity: Option<f64>,
    /// Repairs made, for the log; empty for a well-formed answer.
    pub(crate) repairs: Vec<String>,
}

#[cfg(test)]
impl Checked {
    /// Whether the lease has already expired at `now`.
    pub(crate) fn expired_at(&self, now: Timestamp) -> bool {
        self.lease.expiry <= now
    }
}

/// Checks the server's answer for one resource.
///
/// `min_refresh` is the shortest refresh interval the client accepts.
pub(crate) fn check(
    response: &pb::ResourceResponse,
    now: Timestamp,
    min_refresh: Duration,
) -> Result<Checked, Refused> {
    let gets = &response.gets;
    // `gets` is a required message: prost decodes a missing one as all
    // zeros. No real lease expires at the epoch, so that means "no lease".
    if gets.expiry_time <= 0 {
        return Err(Refused::NoLease);
    }
    if !gets.capacity.is_finite() || gets.capacity < 0.0 {
        return Err(Refused::BadCapacity(gets.capacity));
    }
    let mut repairs = Vec::new();
    let refresh_interval = match u64::try_from(gets.refresh_interval) {
        Ok(secs) if Duration::from_secs(secs) >= min_refresh => Duration::from_secs(secs),
        _ => {
            repairs.push(format!(
                "refresh_interval {} s raised to {:?}",
                gets.refresh_interval, min_refresh
            ));
            min_refresh
        }
    };
    let expiry = Duration::from_secs(gets.expiry_time.unsigned_abs());
    if expiry <= now {
        repairs.push(format!(
            "expiry_time {} is not after now ({}): lease counts as expired",
            gets.expiry_time,
            now.as_secs()
        ));
    }
    let safe_capacity = match response.safe_capacity {
        Some(s) if s.is_finite() && s >= 0.0 => Some(s),
        Some(s) => {
            repairs.push(format!("safe_capacity {s} ignored"));
            None
        }
        None => None,
    };
    Ok(Checked {
        lease: Lease {
            capacity: gets.capacity,
            expiry,
            refresh_interval,
        },
        safe_capacity,
        repairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Duration::from_secs(1_000);
    const MIN: Duration = Duration::from_secs(1);

    fn response(
        capacity: f64,
        expiry: i64,
        refresh: i64,
        safe: Option<f64>,
    ) -> pb::ResourceResponse {
        pb::ResourceResponse {
            resource_id: "r".into(),
            gets: pb::Lease {
                expiry_time: expiry,
                refresh_interval: refresh,
                capacity,
            },
            safe_capacity: safe,
        }
    }

    #[test]
    fn a_good_answer_is_taken_as_is() {
        let c = check(&response(10.0, 1_060, 5, Some(2.0)), NOW, MIN).unwrap();
        assert_eq!(
            c.lease,
            Lease {
                capacity: 10.0,
                expiry: Duration::from_secs(1_060),
                refresh_interval: Duration::from_secs(5)
            }
        );
        assert_eq!(c.safe_capacity, Some(2.0));
        assert!(c.repairs.is_empty());
        assert!(!c.expired_at(NOW));
    }

    #[test]
    fn unusable_capacities_are_refused() {
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let r = check(&response(bad, 1_060, 5, None), NOW, MIN).unwrap_err();
            assert!(matches!(r, Refused::BadCapacity(_)));
        }
        let mut no_gets = response(1.0, 1_060, 5, None);
        no_gets.gets = pb::Lease::default();
        assert_eq!(check(&no_gets, NOW, MIN), Err(Refused::NoLease));
        let negative = response(1.0, -5, 5, None);
        assert_eq!(check(&negative, NOW, MIN), Err(Refused::NoLease));
    }

    #[test]
    fn small_faults_are_repaired() {
        let c = check(&response(0.0, 999, 0, Some(f64::NAN)), NOW, MIN).unwrap();
        assert_eq!(c.lease.refresh_interval, MIN);
        assert_eq!(c.safe_capacity, None);
        assert!(c.expired_at(NOW));
        assert_eq!(c.repairs.len(), 3);
        let c = check(&response(0.0, 1_000, -7, Some(-1.0)), NOW, MIN).unwrap();
        assert_eq!(c.lease.expiry, NOW);
        assert!(c.expired_at(NOW));
        assert_eq!(c.lease.refresh_interval, MIN);
        assert_eq!(c.safe_capacity, None);
    }

    #[test]
    fn modes_fall_back_as_documented() {
        assert_eq!(fallback(ExpiryMode::Optimistic, 7.0, Some(2.0)), 7.0);
        assert_eq!(fallback(ExpiryMode::Pessimistic, 7.0, Some(2.0)), 0.0);
        assert_eq!(fallback(ExpiryMode::Safe, 7.0, Some(2.0)), 2.0);
        assert_eq!(fallback(ExpiryMode::Safe, 7.0, None), 0.0);
        assert_eq!("safe".parse::<ExpiryMode>(), Ok(ExpiryMode::Safe));
        assert!("brave".parse::<ExpiryMode>().is_err());
    }
}
