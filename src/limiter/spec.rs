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
//! Spec strings are parsed exactly, with integers only. The scanner keeps a
//! number as its significant decimal digits and the power of ten of the last
//! one (`1.5K` is 15 × 10²), folding in the fraction, the `e` exponent and the
//! unit suffix. The digit count bounds the magnitude, so a value far out of
//! range (`1e999999999`, a 500-digit rate) is rejected before any arithmetic
//! could overflow; only then is the integer built. A value that needs a
//! digit below the unit (finer than 10⁻⁹ ops/s or 10⁻⁶ of ratio) is an error,
//! never silently rounded.
//!
//! [`RateSpec::new`] and [`RateSpec::with_burst_ratio`] take an `f64`, which
//! is already a binary approximation: they round its exact value to the
//! nearest unit (ties away from zero), splitting the float into mantissa and
//! exponent rather than multiplying in floating point.
//!
//! `Display` writes the shortest exact form of the rate, preferring a unit
//! suffix on a tie (`1.5K`, not `1500`; but `100K`, not `0.1M`), so
//! `parse(display(s)) == s`.

use std::error::Error;
use std::fmt;
use std::str::FromStr;

/// The rate's unit: nano-ops per second per op per second.
const NANOS_PER_OP: f64 = 1e9;
/// The burst ratio's unit: parts per million.
const PPM: f64 = 1e6;
/// [`RateSpec::DEFAULT_BURST_RATIO`] in ppm.
const DEFAULT_PPM: u64 = 1_100_000;

/// A fixed-point quantity: the unit is 10^-`point`, and a valid value lies
/// between 10^`min_pow` and 10^`max_pow` units inclusive.
#[derive(Debug)]
struct Unit {
    point: u32,
    min_pow: u32,
    max_pow: u32,
}

/// Rates: nano-ops per second, 0.001 ..= 1e12 ops/s.
const RATE: Unit = Unit {
    point: 9,
    min_pow: 6,
    max_pow: 21,
};

/// Burst ratios: parts per million, 1.0 ..= 1000.0.
const RATIO: Unit = Unit {
    point: 6,
    min_pow: 6,
    max_pow: 9,
};

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
/// use tollgate::{RateSpec, Verb};
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

    /// The exact rate in nano-ops per second, 10⁶ ..= 10²¹.
    pub(crate) fn nano_ops_per_sec(&self) -> u128 {
        self.nano
    }

    /// The exact burst ratio in parts per million, 10⁶ ..= 10⁹.
    pub(crate) fn burst_ppm(&self) -> u64 {
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

/// Why a [`RateSpec`] or [`Verb`] could not be built: what is wrong, where
/// (the offending part and its byte offset in the input), and what was
/// expected.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// The input is empty or only whitespace.
    Empty,
    /// A part after the verb, or a fourth part.
    TooManyParts { part: Part, after_verb: bool },
    /// Nothing (or only whitespace) between separators.
    EmptyPart { field: Field, at: usize },
    /// Not the syntax of a number; `detail` says where scanning stopped.
    NotANumber {
        field: Field,
        part: Part,
        detail: Option<Detail>,
    },
    /// A NaN or infinite `f64`.
    NotFinite { field: Field, part: Part },
    /// A number below (`low`) or above the field's range.
    OutOfRange { field: Field, part: Part, low: bool },
    /// A number with a digit below the field's unit.
    TooPrecise { field: Field, part: Part },
    /// A word that is not a verb; `or_ratio` if a ratio would also fit.
    UnknownVerb { part: Part, or_ratio: bool },
}

/// Which part of the spec an error is about.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Rate,
    BurstRatio,
    /// The second of two parts: a burst ratio or a verb.
    RatioOrVerb,
    Verb,
}

/// The offending text (clipped) and its byte offset, unless it came from an
/// `f64` or a lone verb.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    text: String,
    at: Option<usize>,
}

/// Where and why a number's syntax broke, as a byte offset in the input.
#[derive(Debug, Clone, PartialEq)]
enum Detail {
    Unexpected { found: char, at: usize },
    Missing { what: &'static str, at: usize },
}

impl SpecError {
    fn new(kind: Kind) -> SpecError {
        SpecError { kind }
    }
}

impl Part {
    fn at(text: &str, at: usize) -> Part {
        Part {
            text: clip(text),
            at: Some(at),
        }
    }

    /// ` at byte N`, or nothing.
    fn offset(&self) -> String {
        self.at
            .map_or_else(String::new, |at| format!(" at byte {at}"))
    }
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Rate => "rate",
            Field::BurstRatio => "burst ratio",
            Field::RatioOrVerb => "part",
            Field::Verb => "verb",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Field::Rate => "e.g. 1000, 1.5K, 10M or 1E6",
            Field::BurstRatio => "e.g. 1.1, 1.5 or 2",
            Field::RatioOrVerb => {
                "a burst ratio (e.g. 1.1) or a verb (configure, start or restart)"
            }
            Field::Verb => "configure, start or restart",
        }
    }

    fn range(self) -> &'static str {
        match self {
            Field::Rate => "must be between 0.001 and 1e12 ops/s",
            _ => "must be between 1.0 and 1000",
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str(
                "empty spec: expected <rate>[,<burst ratio>][,<verb>], e.g. 10K,1.1,start",
            ),
            Kind::TooManyParts {
                part,
                after_verb: true,
            } => write!(
                f,
                "too many parts: {:?}{} follows the verb, which must come last",
                part.text,
                part.offset()
            ),
            Kind::TooManyParts {
                part,
                after_verb: false,
            } => write!(
                f,
                "too many parts: {:?}{} is a fourth part; expected <rate>[,<burst ratio>][,<verb>]",
                part.text,
                part.offset()
            ),
            Kind::EmptyPart { field, at } => write!(
                f,
                "empty {} at byte {at}: expected {}",
                field.name(),
                field.expected()
            ),
            Kind::NotANumber {
                field,
                part,
                detail,
            } => {
                write!(
                    f,
                    "{} {:?}{} is not a number",
                    field.name(),
                    part.text,
                    part.offset()
                )?;
                match detail {
                    Some(Detail::Unexpected { found, at }) => {
                        write!(f, " (unexpected \"{}\" at byte {at})", found.escape_debug())?
                    }
                    Some(Detail::Missing { what, at }) => {
                        write!(f, " (missing {what} at byte {at})")?;
                    }
                    None => {}
                }
                write!(f, ": expected {}", field.expected())
            }
            Kind::NotFinite { field, part } => write!(
                f,
                "{} {}{} is not finite: {}",
                field.name(),
                part.text,
                part.offset(),
                field.range()
            ),
            Kind::OutOfRange { field, part, low } => {
                let problem = match (field, low) {
                    (Field::Rate, _) => "is out of range",
                    (_, true) => "is below 1.0",
                    (_, false) => "is above 1000",
                };
                write!(
                    f,
                    "{} {}{} {problem}: {}",
                    field.name(),
                    part.text,
                    part.offset(),
                    field.range()
                )
            }
            Kind::TooPrecise { field, part } => {
                let resolution = match field {
                    Field::Rate => "0.000000001 ops/s (9 decimal places)",
                    _ => "0.000001 (6 decimal places)",
                };
                write!(
                    f,
                    "{} {}{} is too precise: the resolution is {resolution}",
                    field.name(),
                    part.text,
                    part.offset()
                )
            }
            Kind::UnknownVerb { part, or_ratio } => {
                write!(
                    f,
                    "unknown verb {:?}{}: expected configure, start or restart",
                    part.text,
                    part.offset()
                )?;
                if *or_ratio {
                    f.write_str(" (or a burst ratio such as 1.1)")?;
                }
                Ok(())
            }
        }
    }
}

impl Error for SpecError {}

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

/// What a number that ends early lacks, judged by its last byte.
fn missing_at_end(text: &str) -> &'static str {
    match text.as_bytes().last() {
        Some(b'e' | b'E') => "exponent digits",
        Some(b'/') => "\"s\"",
        Some(b'+' | b'-') if text.len() > 1 => "exponent digits",
        _ => "digits",
    }
}

/// A decimal number as written: `±digits × 10^exp`, where `digits` has no
/// leading or trailing zeros.
#[derive(Debug)]
struct Decimal {
    negative: bool,
    /// How many significant digits; 0 for zero.
    len: usize,
    /// The significant digits, if there are at most 38 (they fit a `u128`).
    digits: Option<u128>,
    /// The power of ten of the last significant digit.
    exp: i64,
}

/// Why a [`Decimal`] does not fit a [`Unit`].
#[derive(Debug, PartialEq)]
enum Reject {
    Low,
    High,
    TooPrecise,
}

/// Exponents are clamped to this magnitude while scanning; far beyond any
/// range, far from overflowing an `i64`.
const EXP_CLAMP: i64 = 1_000_000_000_000_000;

/// Scans `text` as `[+-]digits[.digits][(e|E)[+-]digits]`, then, if
/// `suffixes`, an optional unit suffix and an optional `/s`. On a syntax
/// error returns the byte offset (in `text`) where scanning stopped.
fn scan(text: &str, suffixes: bool) -> Result<Decimal, usize> {
    let b = text.as_bytes();
    let mut i = 0;
    let digits_from = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        &b[start..*i]
    };
    let sign = |i: &mut usize| match b.get(*i) {
        Some(b'-') => {
            *i += 1;
            true
        }
        Some(b'+') => {
            *i += 1;
            false
        }
        _ => false,
    };

    let negative = sign(&mut i);
    let int = digits_from(&mut i);
    let mut frac: &[u8] = &[];
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac = digits_from(&mut i);
    }
    if int.is_empty() && frac.is_empty() {
        return Err(i);
    }

    let mut exp: i64 = 0;
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let exp_negative = sign(&mut i);
        let exp_digits = digits_from(&mut i);
        if exp_digits.is_empty() {
            return Err(i);
        }
        for d in exp_digits {
            exp = (exp * 10 + i64::from(d - b'0')).min(EXP_CLAMP);
        }
        if exp_negative {
            exp = -exp;
        }
    }
    if suffixes {
        let power = match b.get(i).map(u8::to_ascii_uppercase) {
            Some(b'K') => 3,
            Some(b'M') => 6,
            Some(b'G' | b'B') => 9,
            Some(b'T') => 12,
            _ => 0,
        };
        if power > 0 {
            i += 1;
            exp += power;
        }
        if b.get(i) == Some(&b'/') {
            i += 1;
            if !matches!(b.get(i), Some(b's' | b'S')) {
                return Err(i);
            }
            i += 1;
        }
    }
    if i < b.len() {
        return Err(i);
    }

    let digit = |k: usize| {
        if k < int.len() {
            int[k]
        } else {
            frac[k - int.len()]
        }
    };
    let count = int.len() + frac.len();
    let Some(first) = (0..count).find(|&k| digit(k) != b'0') else {
        return Ok(Decimal {
            negative,
            len: 0,
            digits: Some(0),
            exp: 0,
        });
    };
    let last = (first..count)
        .rev()
        .find(|&k| digit(k) != b'0')
        .unwrap_or(first);
    let len = last - first + 1;
    let digits = (len <= 38)
        .then(|| (first..=last).fold(0u128, |acc, k| acc * 10 + u128::from(digit(k) - b'0')));
    // The digit at index `k` is worth 10^(int.len() - 1 - k + exp).
    let exp = to_i64(int.len())
        .saturating_sub(1)
        .saturating_sub(to_i64(last))
        .saturating_add(exp);
    Ok(Decimal {
        negative,
        len,
        digits,
        exp,
    })
}

impl Decimal {
    /// This number as an exact count of `unit`s, if it is in range and has
    /// no digit below the unit.
    fn to_fixed(&self, unit: &Unit) -> Result<u128, Reject> {
        if self.len == 0 || self.negative {
            return Err(Reject::Low);
        }
        // The last digit is worth 10^shift units, and the value lies in
        // [10^(top - 1), 10^top) units.
        let shift = self.exp.saturating_add(i64::from(unit.point));
        let top = shift.saturating_add(to_i64(self.len));
        if top > i64::from(unit.max_pow) + 1 {
            return Err(Reject::High);
        }
        if top <= i64::from(unit.min_pow) {
            return Err(Reject::Low);
        }
        if shift < 0 {
            return Err(Reject::TooPrecise);
        }
        // Now 0 <= shift and len <= top <= max_pow + 1 <= 22: all fits.
        let value = u32::try_from(shift)
            .ok()
            .and_then(|shift| 10u128.checked_pow(shift))
            .zip(self.digits)
            .and_then(|(scale, digits)| digits.checked_mul(scale))
            .ok_or(Reject::High)?;
        if value < 10u128.pow(unit.min_pow) {
            Err(Reject::Low)
        } else if value > 10u128.pow(unit.max_pow) {
            Err(Reject::High)
        } else {
            Ok(value)
        }
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

/// `x × scale` rounded to the nearest integer (ties away from zero),
/// computed exactly, for a finite `0 <= x < 2^53` and `scale < 2^64`.
fn round_scaled(x: f64, scale: u128) -> u128 {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = u128::from(bits & ((1 << 52) - 1));
    // x = mantissa × 2^power
    let (mantissa, power) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | 1 << 52, biased - 1075)
    };
    // Below 2^53 × 2^64 = 2^117: no overflow.
    let product = mantissa * scale;
    match u32::try_from(-power) {
        Err(_) => product << power.min(127),
        Ok(down) if down >= 128 => 0,
        Ok(0) => product,
        Ok(down) => {
            let whole = product >> down;
            let rest = product - (whole << down);
            whole + u128::from(rest >= 1 << (down - 1))
        }
    }
}

/// An `f64` for an error message: plain, or in `e` notation when that is
/// much shorter.
fn f64_to_string(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e16 || x.abs() < 1e-6) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// `value` units of 10^-`point` as a plain decimal, without trailing zeros.
fn fixed_to_string(value: u128, point: u32) -> String {
    let one = 10u128.pow(point);
    let (whole, fraction) = (value / one, value % one);
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:0width$}", width = point as usize);
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// The shortest exact spelling of a rate; on a tie, the larger suffix
/// unless it needs a leading `0.` (`100K`, not `0.1M`).
fn rate_to_string(nano: u128) -> String {
    let mut best = fixed_to_string(nano, RATE.point);
    for (suffix, power) in [("K", 3), ("M", 6), ("G", 9), ("T", 12)] {
        let candidate = fixed_to_string(nano, RATE.point + power) + suffix;
        let tie_ok = !candidate.starts_with("0.");
        if candidate.len() < best.len() || (candidate.len() == best.len() && tie_ok) {
            best = candidate;
        }
    }
    best
}

/// A ppm value already checked against `RATIO`'s range.
fn narrow_ppm(ppm: u128) -> u64 {
    u64::try_from(ppm).unwrap_or(u64::MAX)
}

/// `text`, cut to 40 characters for an error message.
fn clip(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}...", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> RateSpec {
        s.parse()
            .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn err(s: &str) -> String {
        match s.parse::<RateSpec>() {
            Ok(spec) => panic!("{s:?} should not parse, got {spec:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn spec(nano: u128, ppm: u64, verb: Verb) -> RateSpec {
        RateSpec { nano, ppm, verb }
    }

    const E9: u128 = 1_000_000_000;

    #[test]
    fn spec_examples_parse() {
        assert_eq!(parse("200"), spec(200 * E9, 1_100_000, Verb::Start));
        assert_eq!(parse("3.6,2"), spec(3_600_000_000, 2_000_000, Verb::Start));
        assert_eq!(
            parse("1000,1.05,restart"),
            spec(1000 * E9, 1_050_000, Verb::Restart)
        );
        assert_eq!(
            parse("10M,1.1"),
            spec(10_000_000 * E9, 1_100_000, Verb::Start)
        );
    }

    #[test]
    fn rate_forms() {
        let cases: &[(&str, u128)] = &[
            ("12000", 12_000 * E9),
            ("1.5K", 1_500 * E9),
            ("10M", 10_000_000 * E9),
            ("1E6", 1_000_000 * E9),
            ("2.5e-3", 2_500_000),
            ("0.5", 500_000_000),
            ("10K/s", 10_000 * E9),
            ("10k/S", 10_000 * E9),
            ("100/s", 100 * E9),
            ("2g", 2_000_000_000 * E9),
            ("2B", 2_000_000_000 * E9),
            ("1T", 1_000_000_000_000 * E9),
            ("1e3K", 1_000_000 * E9),
            ("+5", 5 * E9),
            ("5.", 5 * E9),
            (".5", 500_000_000),
            ("1e+3", 1_000 * E9),
            ("0.001", 1_000_000),
            ("1e-3", 1_000_000),
            ("1e12", 1_000_000_000_000 * E9),
            ("0.000001M", E9),
        ];
        for &(text, nano) in cases {
            assert_eq!(parse(text).nano_ops_per_sec(), nano, "{text}");
        }
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse("0.1").nano_ops_per_sec(), 100_000_000);
        assert_eq!(parse("1.5K").nano_ops_per_sec(), 1_500_000_000_000);
        assert_eq!(
            parse("333333.333333333").nano_ops_per_sec(),
            333_333_333_333_333
        );
        assert_eq!(parse("1.000000001").nano_ops_per_sec(), 1_000_000_001);
        assert_eq!(
            parse("999999999999.999999999").nano_ops_per_sec(),
            10u128.pow(21) - 1
        );
        // Zeros beyond the resolution are not extra precision.
        assert_eq!(
            parse("0.1000000000000000000000000000000000000000000").nano_ops_per_sec(),
            100_000_000
        );
        let padded = format!("{}7", "0".repeat(60));
        assert_eq!(parse(&padded).nano_ops_per_sec(), 7 * E9);
        assert_eq!(parse("100,1.000001").burst_ppm(), 1_000_001);
        assert_eq!(parse("100,1000").burst_ppm(), 1_000_000_000);
        assert_eq!(parse("100,1e1").burst_ppm(), 10_000_000);
    }

    #[test]
    fn separators_whitespace_and_verb_position() {
        let want = spec(10_000 * E9, 2_000_000, Verb::Configure);
        assert_eq!(parse(" 10K : 2 ; configure "), want);
        assert_eq!(parse("10K;2,CONFIGURE"), want);
        assert_eq!(parse("10K\t,\n2:Configure"), want);
        assert_eq!(
            parse("100,restart"),
            spec(100 * E9, 1_100_000, Verb::Restart)
        );
        assert_eq!(parse("100 : Start"), spec(100 * E9, 1_100_000, Verb::Start));
    }

    #[test]
    fn display_is_canonical() {
        let cases = [
            ("10M", "10M,1.1"),
            ("1500", "1.5K,1.1"),
            ("0.001", "0.001,1.1"),
            ("333333.333333333", "333333.333333333,1.1"),
            ("200,2", "200,2"),
            ("1000,1.05,restart", "1K,1.05,restart"),
            ("1000 ; 1.05 ; start", "1K,1.05"),
            ("12000,1.5,configure", "12K,1.5,configure"),
            ("1e12", "1T,1.1"),
            ("1e9", "1G,1.1"),
            ("1B", "1G,1.1"),
            ("2500000", "2.5M,1.1"),
            ("1234", "1234,1.1"),
            ("123456", "123456,1.1"),
            ("0.5", "0.5,1.1"),
            ("100K", "100K,1.1"),
            ("100000000", "100M,1.1"),
            ("3.6,2", "3.6,2"),
            ("100,1.000001", "100,1.000001"),
            ("100,1000", "100,1000"),
        ];
        for (input, shown) in cases {
            assert_eq!(parse(input).to_string(), shown, "{input}");
            assert_eq!(parse(shown), parse(input), "{shown}");
        }
    }

    #[test]
    fn accessors() {
        let s = parse("3.6,2,configure");
        assert_eq!(s.ops_per_sec(), 3.6);
        assert_eq!(s.burst_ratio(), 2.0);
        assert_eq!(s.verb(), Verb::Configure);
        assert_eq!(parse("200").burst_ratio(), RateSpec::DEFAULT_BURST_RATIO);
        assert_eq!(parse("200").verb(), Verb::Start);
    }

    #[test]
    fn same_schedule_ignores_only_the_verb() {
        let base = parse("100");
        assert!(base.same_schedule(&parse("100,1.1,configure")));
        assert!(base.same_schedule(&parse("0.1K:restart")));
        assert_ne!(base, parse("100,restart"));
        assert!(!base.same_schedule(&parse("100,1.2")));
        assert!(!base.same_schedule(&parse("100.000000001")));
        assert!(base.same_schedule(&RateSpec::new(100.0).unwrap()));
    }

    #[test]
    fn verbs() {
        assert_eq!(Verb::default(), Verb::Start);
        for (text, verb) in [
            ("configure", Verb::Configure),
            ("START", Verb::Start),
            ("ReStArT", Verb::Restart),
        ] {
            assert_eq!(text.parse::<Verb>(), Ok(verb));
            assert_eq!(verb.to_string(), text.to_ascii_lowercase());
        }
        assert_eq!(
            "go".parse::<Verb>().unwrap_err().to_string(),
            "unknown verb \"go\": expected configure, start or restart"
        );
    }

    #[test]
    fn constructors() {
        assert_eq!(RateSpec::new(0.1).unwrap(), parse("0.1"));
        assert_eq!(RateSpec::new(1500.0).unwrap(), parse("1.5K"));
        assert_eq!(RateSpec::new(0.001).unwrap().nano_ops_per_sec(), 1_000_000);
        assert_eq!(
            RateSpec::new(1e12).unwrap().nano_ops_per_sec(),
            10u128.pow(21)
        );
        assert_eq!(
            RateSpec::new(1.0 / 3.0).unwrap().nano_ops_per_sec(),
            333_333_333
        );
        // Rounded to the nearest nano-op/s, not truncated.
        assert_eq!(
            RateSpec::new(1.0000000006).unwrap().nano_ops_per_sec(),
            1_000_000_001
        );
        let s = RateSpec::new(100.0)
            .unwrap()
            .with_burst_ratio(1.05)
            .unwrap()
            .with_verb(Verb::Restart);
        assert_eq!(s, parse("100,1.05,restart"));
        assert_eq!(s.with_burst_ratio(1.0).unwrap().burst_ppm(), 1_000_000);
        assert_eq!(
            s.with_burst_ratio(1000.0).unwrap().burst_ppm(),
            1_000_000_000
        );
        assert_eq!(
            s.with_burst_ratio(1.0000004).unwrap().burst_ppm(),
            1_000_000
        );
        assert_eq!(
            s.with_burst_ratio(1.0000006).unwrap().burst_ppm(),
            1_000_001
        );
    }

    #[test]
    fn constructor_errors() {
        let new_err = |x: f64| RateSpec::new(x).unwrap_err().to_string();
        let ratio_err = |x: f64| {
            RateSpec::new(1.0)
                .unwrap()
                .with_burst_ratio(x)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            new_err(0.0),
            "rate 0 is out of range: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(-1.0),
            "rate -1 is out of range: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(1e13),
            "rate 10000000000000 is out of range: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(1e300),
            "rate 1e300 is out of range: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(0.000999),
            "rate 0.000999 is out of range: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(f64::NAN),
            "rate NaN is not finite: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            new_err(f64::INFINITY),
            "rate inf is not finite: must be between 0.001 and 1e12 ops/s"
        );
        assert_eq!(
            ratio_err(0.5),
            "burst ratio 0.5 is below 1.0: must be between 1.0 and 1000"
        );
        assert_eq!(
            ratio_err(1000.5),
            "burst ratio 1000.5 is above 1000: must be between 1.0 and 1000"
        );
        assert_eq!(
            ratio_err(f64::NEG_INFINITY),
            "burst ratio -inf is not finite: must be between 1.0 and 1000"
        );
        assert!(ratio_err(f64::NAN).contains("not finite"));
    }

    #[test]
    fn error_messages() {
        let cases = [
            (
                "abc",
                "rate \"abc\" at byte 0 is not a number: expected e.g. 1000, 1.5K, 10M or 1E6",
            ),
            (
                "0",
                "rate 0 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
            ),
            (
                "100,0.5",
                "burst ratio 0.5 at byte 4 is below 1.0: must be between 1.0 and 1000",
            ),
            (
                "100,2,go",
                "unknown verb \"go\" at byte 6: expected configure, start or restart",
            ),
            (
                "100,go",
                "unknown verb \"go\" at byte 4: expected configure, start or restart \
                 (or a burst ratio such as 1.1)",
            ),
            (
                "1,2,start,4",
                "too many parts: \"4\" at byte 10 is a fourth part; \
                 expected <rate>[,<burst ratio>][,<verb>]",
            ),
            (
                "100,start,2",
                "too many parts: \"2\" at byte 10 follows the verb, which must come last",
            ),
            (
                "",
                "empty spec: expected <rate>[,<burst ratio>][,<verb>], e.g. 10K,1.1,start",
            ),
            (
                "100,,start",
                "empty burst ratio at byte 4: expected e.g. 1.1, 1.5 or 2",
            ),
            (
                "100,",
                "empty part at byte 4: expected a burst ratio (e.g. 1.1) \
                 or a verb (configure, start or restart)",
            ),
            (
                "100,2, ",
                "empty verb at byte 6: expected configure, start or restart",
            ),
            (
                " ,5",
                "empty rate at byte 0: expected e.g. 1000, 1.5K, 10M or 1E6",
            ),
            (
                "10Mx",
                "rate \"10Mx\" at byte 0 is not a number (unexpected \"x\" at byte 3): \
                 expected e.g. 1000, 1.5K, 10M or 1E6",
            ),
            (
                "  1e",
                "rate \"1e\" at byte 2 is not a number (missing exponent digits at byte 4): \
                 expected e.g. 1000, 1.5K, 10M or 1E6",
            ),
            (
                "10K/",
                "rate \"10K/\" at byte 0 is not a number (missing \"s\" at byte 4): \
                 expected e.g. 1000, 1.5K, 10M or 1E6",
            ),
            (
                "100,abc,start",
                "burst ratio \"abc\" at byte 4 is not a number: expected e.g. 1.1, 1.5 or 2",
            ),
            (
                "100,2K",
                "burst ratio \"2K\" at byte 4 is not a number (unexpected \"K\" at byte 5): \
                 expected e.g. 1.1, 1.5 or 2",
            ),
            (
                "-5",
                "rate -5 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
            ),
            (
                "1e13",
                "rate 1e13 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
            ),
            (
                "1e999999999",
                "rate 1e999999999 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
            ),
            (
                "1e-999999999",
                "rate 1e-999999999 at byte 0 is out of range: \
                 must be between 0.001 and 1e12 ops/s",
            ),
            (
                "1.0000000001",
                "rate 1.0000000001 at byte 0 is too precise: \
                 the resolution is 0.000000001 ops/s (9 decimal places)",
            ),
            (
                "100, 1.0000001",
                "burst ratio 1.0000001 at byte 5 is too precise: \
                 the resolution is 0.000001 (6 decimal places)",
            ),
            (
                "100,1001",
                "burst ratio 1001 at byte 4 is above 1000: must be between 1.0 and 1000",
            ),
            (
                "100,-2,start",
                "burst ratio -2 at byte 4 is below 1.0: must be between 1.0 and 1000",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(err(input), message, "{input:?}");
        }
    }

    #[test]
    fn junk_is_rejected() {
        for input in [
            "   ",
            "inf",
            "NaN",
            "-inf",
            "0e5",
            "-0",
            "1..5",
            "1.5.5",
            "e5",
            "1e5.5",
            "1KK",
            "1K/s/s",
            "10 K",
            "1_000",
            "0x10",
            "１００",
            "100é",
            "100,1.1,start,",
            "100;;",
            ":",
            "1ee5",
            "1e--5",
            "10Mx,2",
        ] {
            let e = input.parse::<RateSpec>().unwrap_err();
            assert!(!e.to_string().is_empty());
        }
        assert!(err("１００").contains("\"１００\" at byte 0 is not a number"));
        assert!(err("100é").contains("unexpected \"é\" at byte 3"));
        assert!(err("inf").starts_with("rate \"inf\" at byte 0 is not a number"));
        let long = "9".repeat(500);
        assert!(err(&long)
            .ends_with("... at byte 0 is out of range: must be between 0.001 and 1e12 ops/s"));
    }

    #[test]
    fn spec_error_is_an_error() {
        fn is_error<E: Error + Send + Sync + 'static>() {}
        is_error::<SpecError>();
        for input in ["x", "", "0", "100,0.5", "1,2,3,4", "100,go", "100,,start"] {
            let message = err(input);
            assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
            assert!(!message.ends_with('.'), "{message}");
        }
        assert!("x".parse::<RateSpec>().unwrap_err().source().is_none());
    }

    /// Any valid spec: uniform over the fixed-point ranges, or "round"
    /// numbers (few significant digits) that exercise the suffixes.
    fn any_spec() -> impl Strategy<Value = RateSpec> {
        let nano = prop_oneof![
            10u128.pow(RATE.min_pow)..=10u128.pow(RATE.max_pow),
            (1u128..1000, 0u32..=21)
                .prop_map(|(m, p)| m * 10u128.pow(p))
                .prop_filter("in range", |n| (1_000_000..=10u128.pow(21)).contains(n)),
        ];
        let ppm = prop_oneof![
            1_000_000u64..=1_000_000_000,
            (1u64..1000, 0u32..=9)
                .prop_map(|(m, p)| m * 10u64.pow(p))
                .prop_filter("in range", |n| (1_000_000..=1_000_000_000).contains(n)),
        ];
        let verb = prop_oneof![
            Just(Verb::Configure),
            Just(Verb::Start),
            Just(Verb::Restart)
        ];
        (nano, ppm, verb).prop_map(|(nano, ppm, verb)| spec(nano, ppm, verb))
    }

    proptest! {
        #[test]
        fn display_round_trips(s in any_spec()) {
            let shown = s.to_string();
            prop_assert_eq!(shown.parse::<RateSpec>(), Ok(s), "{}", shown);
        }

        #[test]
        fn separators_and_spaces_do_not_matter(
            s in any_spec(),
            seps in proptest::collection::vec(prop_oneof![Just(','), Just(':'), Just(';')], 2),
            pad in proptest::collection::vec("[ \t]{0,2}", 6),
        ) {
            let canonical = s.to_string();
            let fields: Vec<&str> = canonical.split(',').collect();
            let mut text = String::new();
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    text.push(seps[i - 1]);
                }
                text.push_str(&pad[2 * i]);
                text.push_str(field);
                text.push_str(&pad[2 * i + 1]);
            }
            prop_assert_eq!(text.parse::<RateSpec>(), Ok(s), "{:?}", text);
        }

        #[test]
        fn plain_decimals_parse_exactly(nano in 1_000_000u128..=10u128.pow(21)) {
            let text = fixed_to_string(nano, 9);
            prop_assert_eq!(parse(&text).nano_ops_per_sec(), nano);
        }

        #[test]
        fn integers_with_suffixes_parse_exactly(n in 1u128..=1_000_000_000) {
            prop_assert_eq!(parse(&format!("{n}")).nano_ops_per_sec(), n * E9);
            prop_assert_eq!(parse(&format!("{n}K/s")).nano_ops_per_sec(), n * E9 * 1000);
            prop_assert_eq!(parse(&format!("{n}e-3")).nano_ops_per_sec(), n * 1_000_000);
        }

        #[test]
        fn new_inverts_ops_per_sec(nano in 1_000_000u128..(1 << 50), ppm in 1_000_000u64..=1_000_000_000) {
            let s = spec(nano, ppm, Verb::Start);
            let again = RateSpec::new(s.ops_per_sec())
                .and_then(|r| r.with_burst_ratio(s.burst_ratio()));
            prop_assert_eq!(again, Ok(s));
        }

        #[test]
        fn arbitrary_strings_never_panic(text in any::<String>()) {
            let _ = text.parse::<RateSpec>();
            let _ = text.parse::<Verb>();
        }

        #[test]
        fn spec_like_strings_never_panic(text in "[-+0-9.eEkKmMgGbBtT/sS,:; a-z]{0,24}") {
            if let Ok(s) = text.parse::<RateSpec>() {
                prop_assert_eq!(s.to_string().parse::<RateSpec>(), Ok(s));
            }
        }
    }
}
