//! [`RateSpec`]: a limiter's configuration (rate, burst ratio, lifecycle
//! verb) and the grammar of its spec string.
//!
//! # Implementation notes
//!
//! Both numbers are fixed-point integers, never floats, so that two specs
//! compare exactly (applying an equal spec is a no-op) and the pool
//! arithmetic built on them carries no float drift:
//!
//! - The rate is a `u128` count of nano-ops per second (ops/s × 10⁹). The
//!   allowed range, 0.001 ..= 10¹² ops/s, is 10⁶ ..= 10²¹ nano-ops/s: too wide
//!   for a `u64` (which ends near 1.8 × 10¹⁰ ops/s), comfortable in a `u128`.
//!   An op costs 10¹⁸ / nano-ops ns of schedule time, so the pool can carry
//!   the remainder instead of truncating the cost to whole nanoseconds.
//! - The burst ratio is a `u64` in parts per million (1.1 is 1_100_000);
//!   the range 1.0 ..= 1000.0 is 10⁶ ..= 10⁹ ppm.
//!
//! The grammar lives here; the exact decimal scanner and the fixed-point
//! units in `spec/decimal.rs`, the error model in `spec/error.rs`.
//!
//! `Display` writes the shortest exact form of the rate, preferring a unit
//! suffix on a tie (`1.5K`, not `1500`; but `100K`, not `0.1M`), so
//! `parse(display(s)) == s`.

mod decimal;
mod error;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use decimal::{fixed_to_string, rate_to_string, round_scaled, scan, Reject, RATE, RATIO};
pub use error::SpecError;
use error::{clip, f64_to_string, missing_at_end, Detail, Field, Kind, Part};

/// The rate's unit: nano-ops per second per op per second.
const NANOS_PER_OP: f64 = 1e9;
/// The burst ratio's unit: parts per million.
const PPM: f64 = 1e6;
/// [`RateSpec::DEFAULT_BURST_RATIO`] in ppm.
const DEFAULT_PPM: u64 = 1_100_000;

/// A limiter's configuration: a rate in ops/s, a burst ratio and a
/// lifecycle [`Verb`].
///
/// The burst ratio is the catch-up multiplier: while the limiter has a
/// backlog, ops run at up to `rate × burst_ratio`. A ratio of 1.0 never
/// catches up; the default is 1.1.
///
/// A spec parses from `<rate>[,<burst_ratio>][,<verb>]`, or
/// `<rate>,<verb>`. The separators `,`, `:` and `;` may be mixed, and each
/// part may be surrounded by whitespace. A rate is a decimal number, with an
/// optional exponent (`1E6`, `2.5e-3`), an optional unit suffix (`K` = 10³,
/// `M` = 10⁶, `G` or `B` = 10⁹, `T` = 10¹², any case) and an optional `/s`.
/// Numbers are exact: `0.1` is exactly 100_000_000 nano-ops/s.
///
/// `Display` gives the canonical form, which parses back to an equal spec:
/// the shortest exact rate, the burst ratio, and the verb unless it is
/// [`Verb::Start`].
///
/// # Examples
///
/// ```
/// use tollgate::spec::{RateSpec, Verb};
///
/// let spec: RateSpec = " 1.5K/s ; 2 : restart ".parse()?;
/// assert_eq!(spec.ops_per_sec(), 1500.0);
/// assert_eq!(spec.burst_ratio(), 2.0);
/// assert_eq!(spec.verb(), Verb::Restart);
/// assert_eq!(spec.to_string(), "1.5K,2,restart");
///
/// let built = RateSpec::new(1500.0)?
///     .with_burst_ratio(2.0)?
///     .with_verb(Verb::Restart);
/// assert_eq!(built, spec);
///
/// // The verb is not part of the schedule.
/// let plain = "1500,2".parse::<RateSpec>()?;
/// assert_eq!(plain.to_string(), "1.5K,2");
/// assert!(plain.same_schedule(&spec));
///
/// let err = "10Mx".parse::<RateSpec>().unwrap_err();
/// assert!(err.to_string().contains("unexpected \"x\" at byte 3"));
/// # Ok::<(), tollgate::SpecError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateSpec {
    /// The rate in nano-ops per second, in `RATE`'s range.
    nano: u128,
    /// The burst ratio in parts per million, in `RATIO`'s range.
    ppm: u64,
    verb: Verb,
}

/// What applying a [`RateSpec`] does to the limiter's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Verb {
    /// Apply the rate and burst ratio, but do not start the limiter.
    Configure,
    /// Start the limiter if it is idle, otherwise apply the spec.
    #[default]
    Start,
    /// Clear the pools and the backlog, as if the limiter were new.
    Restart,
}

impl RateSpec {
    /// The burst ratio of a spec that does not name one.
    pub const DEFAULT_BURST_RATIO: f64 = 1.1;
    /// The lowest rate, in ops/s.
    pub const MIN_OPS_PER_SEC: f64 = 0.001;
    /// The highest rate, in ops/s.
    pub const MAX_OPS_PER_SEC: f64 = 1e12;
    /// The highest burst ratio; the lowest is 1.0.
    pub const MAX_BURST_RATIO: f64 = 1000.0;

    /// A spec for `ops_per_sec`, with the default burst ratio (1.1) and
    /// [`Verb::Start`]. The rate is rounded to the nearest nano-op/s.
    ///
    /// # Errors
    ///
    /// If `ops_per_sec` is NaN, infinite, or outside
    /// [`MIN_OPS_PER_SEC`](Self::MIN_OPS_PER_SEC) ..=
    /// [`MAX_OPS_PER_SEC`](Self::MAX_OPS_PER_SEC).
    pub fn new(ops_per_sec: f64) -> Result<RateSpec, SpecError> {
        let nano = from_f64(Field::Rate, ops_per_sec)?;
        Ok(RateSpec {
            nano,
            ppm: DEFAULT_PPM,
            verb: Verb::Start,
        })
    }

    /// This spec with burst ratio `ratio`, rounded to the nearest millionth.
    ///
    /// # Errors
    ///
    /// If `ratio` is NaN, infinite, below 1.0 or above
    /// [`MAX_BURST_RATIO`](Self::MAX_BURST_RATIO).
    pub fn with_burst_ratio(self, ratio: f64) -> Result<RateSpec, SpecError> {
        let ppm = from_f64(Field::BurstRatio, ratio)?;
        Ok(RateSpec {
            ppm: narrow_ppm(ppm),
            ..self
        })
    }

    /// This spec with lifecycle verb `verb`.
    #[must_use]
    pub fn with_verb(self, verb: Verb) -> RateSpec {
        RateSpec { verb, ..self }
    }

    /// The rate in ops/s (the nearest `f64`).
    pub fn ops_per_sec(&self) -> f64 {
        self.nano as f64 / NANOS_PER_OP
    }

    /// The burst ratio (the nearest `f64`).
    pub fn burst_ratio(&self) -> f64 {
        self.ppm as f64 / PPM
    }

    /// The lifecycle verb.
    pub fn verb(&self) -> Verb {
        self.verb
    }

    /// Same rate and burst ratio (the verb is ignored): applying such a spec
    /// is a no-op.
    pub fn same_schedule(&self, other: &RateSpec) -> bool {
        self.nano == other.nano && self.ppm == other.ppm
    }

    /// The exact rate in nano-ops per second, 10⁶ ..= 10²¹: what
    /// [`ops_per_sec`](RateSpec::ops_per_sec) rounds.
    ///
    /// ```
    /// let spec: tollgate::RateSpec = "2.5".parse()?;
    /// assert_eq!(spec.nano_ops_per_sec(), 2_500_000_000);
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    pub fn nano_ops_per_sec(&self) -> u128 {
        self.nano
    }

    /// The exact burst ratio in parts per million, 10⁶ ..= 10⁹: what
    /// [`burst_ratio`](RateSpec::burst_ratio) rounds.
    ///
    /// ```
    /// let spec: tollgate::RateSpec = "100,1.5".parse()?;
    /// assert_eq!(spec.burst_ppm(), 1_500_000);
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    pub fn burst_ppm(&self) -> u64 {
        self.ppm
    }
}

impl FromStr for RateSpec {
    type Err = SpecError;

    /// Parses `<rate>[,<burst_ratio>][,<verb>]` or `<rate>,<verb>`; see
    /// [`RateSpec`].
    ///
    /// # Errors
    ///
    /// If the spec is empty or has too many parts, a part is empty or
    /// malformed, a number is out of range or finer than its unit, or the
    /// verb is unknown. The error names the part and its byte offset.
    fn from_str(s: &str) -> Result<RateSpec, SpecError> {
        if s.trim().is_empty() {
            return Err(SpecError::new(Kind::Empty));
        }
        let parts = split_parts(s);
        let count = parts.len();
        let mut parts = parts.into_iter();
        // `split_parts` yields at least one part.
        let (at, rate) = parts.next().unwrap_or((0, ""));
        let mut spec = RateSpec {
            nano: parse_fixed(Field::Rate, rate, at)?,
            ppm: DEFAULT_PPM,
            verb: Verb::Start,
        };

        let Some((at, second)) = parts.next() else {
            return Ok(spec);
        };
        if let Some(verb) = Verb::from_word(second) {
            spec.verb = verb;
            return match parts.next() {
                None => Ok(spec),
                Some((at, extra)) => Err(SpecError::new(Kind::TooManyParts {
                    part: Part::at(extra, at),
                    after_verb: true,
                })),
            };
        }
        if second.is_empty() {
            // Followed by a verb, this can only be the burst ratio.
            let field = if count == 2 {
                Field::RatioOrVerb
            } else {
                Field::BurstRatio
            };
            return Err(SpecError::new(Kind::EmptyPart { field, at }));
        }
        if count == 2 && second.starts_with(|c: char| c.is_alphabetic()) {
            return Err(SpecError::new(Kind::UnknownVerb {
                part: Part::at(second, at),
                or_ratio: true,
            }));
        }
        spec.ppm = narrow_ppm(parse_fixed(Field::BurstRatio, second, at)?);

        let Some((at, third)) = parts.next() else {
            return Ok(spec);
        };
        if third.is_empty() {
            return Err(SpecError::new(Kind::EmptyPart {
                field: Field::Verb,
                at,
            }));
        }
        spec.verb = Verb::from_word(third).ok_or_else(|| {
            SpecError::new(Kind::UnknownVerb {
                part: Part::at(third, at),
                or_ratio: false,
            })
        })?;
        match parts.next() {
            None => Ok(spec),
            Some((at, extra)) => Err(SpecError::new(Kind::TooManyParts {
                part: Part::at(extra, at),
                after_verb: false,
            })),
        }
    }
}

impl fmt::Display for RateSpec {
    /// The canonical form, e.g. `10M,1.1` or `1.5K,2,restart`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ratio = fixed_to_string(u128::from(self.ppm), RATIO.point);
        write!(f, "{},{ratio}", rate_to_string(self.nano))?;
        if self.verb != Verb::Start {
            write!(f, ",{}", self.verb)?;
        }
        Ok(())
    }
}

impl Verb {
    /// The verb named `word`, in any case.
    fn from_word(word: &str) -> Option<Verb> {
        [Verb::Configure, Verb::Start, Verb::Restart]
            .into_iter()
            .find(|verb| word.eq_ignore_ascii_case(verb.as_str()))
    }

    fn as_str(self) -> &'static str {
        match self {
            Verb::Configure => "configure",
            Verb::Start => "start",
            Verb::Restart => "restart",
        }
    }
}

impl fmt::Display for Verb {
    /// `configure`, `start` or `restart`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Verb {
    type Err = SpecError;

    /// Parses `configure`, `start` or `restart`, in any case.
    ///
    /// # Errors
    ///
    /// If `s` is not one of the three verbs.
    fn from_str(s: &str) -> Result<Verb, SpecError> {
        Verb::from_word(s).ok_or_else(|| {
            SpecError::new(Kind::UnknownVerb {
                part: Part {
                    text: clip(s),
                    at: None,
                },
                or_ratio: false,
            })
        })
    }
}

/// Splits `s` at every separator into `(offset, part)`, each part trimmed of
/// whitespace and `offset` the byte where its text starts (for an empty part,
/// where the part starts). Always yields at least one part.
fn split_parts(s: &str) -> Vec<(usize, &str)> {
    fn trimmed(s: &str, start: usize, end: usize) -> (usize, &str) {
        let raw = &s[start..end];
        let text = raw.trim();
        if text.is_empty() {
            (start, text)
        } else {
            (start + raw.len() - raw.trim_start().len(), text)
        }
    }

    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if matches!(c, ',' | ':' | ';') {
            parts.push(trimmed(s, start, i));
            start = i + c.len_utf8();
        }
    }
    parts.push(trimmed(s, start, s.len()));
    parts
}

/// Parses `text` (found at byte `at`) as a rate or burst ratio, exactly, in
/// the field's fixed-point unit.
fn parse_fixed(field: Field, text: &str, at: usize) -> Result<u128, SpecError> {
    if text.is_empty() {
        return Err(SpecError::new(Kind::EmptyPart { field, at }));
    }
    let (unit, suffixes) = match field {
        Field::Rate => (&RATE, true),
        _ => (&RATIO, false),
    };
    let part = || Part::at(text, at);
    let decimal = scan(text, suffixes).map_err(|stop| {
        let detail = match text[stop..].chars().next() {
            // Nothing numeric at all: the part itself says enough.
            Some(_) if stop == 0 => None,
            Some(found) => Some(Detail::Unexpected {
                found,
                at: at + stop,
            }),
            None => Some(Detail::Missing {
                what: missing_at_end(text),
                at: at + stop,
            }),
        };
        SpecError::new(Kind::NotANumber {
            field,
            part: part(),
            detail,
        })
    })?;
    decimal.to_fixed(unit).map_err(|reject| {
        SpecError::new(match reject {
            Reject::Low | Reject::High => Kind::OutOfRange {
                field,
                part: part(),
                low: reject == Reject::Low,
            },
            Reject::TooPrecise => Kind::TooPrecise {
                field,
                part: part(),
            },
        })
    })
}

/// Checks `x` against the field's range and converts it to the field's unit,
/// rounded to nearest.
fn from_f64(field: Field, x: f64) -> Result<u128, SpecError> {
    let (min, max, unit) = match field {
        Field::Rate => (RateSpec::MIN_OPS_PER_SEC, RateSpec::MAX_OPS_PER_SEC, &RATE),
        _ => (1.0, RateSpec::MAX_BURST_RATIO, &RATIO),
    };
    let part = || Part {
        text: f64_to_string(x),
        at: None,
    };
    if !x.is_finite() {
        return Err(SpecError::new(Kind::NotFinite {
            field,
            part: part(),
        }));
    }
    if !(min..=max).contains(&x) {
        return Err(SpecError::new(Kind::OutOfRange {
            field,
            part: part(),
            low: x < min,
        }));
    }
    let value = round_scaled(x, 10u128.pow(unit.point));
    debug_assert!((10u128.pow(unit.min_pow)..=10u128.pow(unit.max_pow)).contains(&value));
    Ok(value)
}

/// A ppm value already checked against `RATIO`'s range.
fn narrow_ppm(ppm: u128) -> u64 {
    u64::try_from(ppm).unwrap_or(u64::MAX)
}
