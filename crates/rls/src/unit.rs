//! [`Unit`]: the length of a rate limit's window, as Envoy names it.

use std::fmt;

/// The window a limit counts over, the unit of `requests_per_unit`.
///
/// Windows are multiples of the unit's length since the Unix epoch (a
/// MONTH is 30 days and a YEAR 365, never calendar ones; a WEEK starts on
/// a Thursday, as 1970-01-01 was one).
///
/// # Examples
///
/// ```
/// use tollgate_rls::Unit;
///
/// assert_eq!(Unit::from_name("Minute"), Some(Unit::Minute));
/// assert_eq!(Unit::Week.seconds(), 604_800);
/// assert_eq!(Unit::from_name("fortnight"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 604,800 seconds.
    Week,
    /// 2,592,000 seconds (30 days).
    Month,
    /// 31,536,000 seconds (365 days).
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window's length in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The unit named `name` in any letter case (`second` … `year`), as
    /// the configuration writes it.
    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(name))
    }

    /// The upper-case name Envoy's enum gives it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit numbered `number` on the wire (SECOND 1 … YEAR 6, WEEK 7);
    /// `None` for UNKNOWN (0) and numbers past the enum.
    pub fn from_wire(number: i32) -> Option<Unit> {
        Some(match number {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// Its number on the wire.
    pub fn wire(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// Its index in [`Unit::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
