//! [`SpecError`]: what is wrong with a spec, where, and what was expected.
//!
//! The parser records a [`Kind`] with the offending [`Field`] and [`Part`];
//! `Display` turns it into one lowercase sentence naming the part, its byte
//! offset and what would have been accepted.

use std::error::Error;
use std::fmt;

/// Why a [`RateSpec`](super::RateSpec) or [`Verb`](super::Verb) could not
/// be built: what is wrong, where (the offending part and its byte offset
/// in the input), and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
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
pub(super) enum Field {
    Rate,
    BurstRatio,
    /// The second of two parts: a burst ratio or a verb.
    RatioOrVerb,
    Verb,
}

/// The offending text (clipped) and its byte offset, unless it came from an
/// `f64` or a lone verb.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Part {
    pub(super) text: String,
    pub(super) at: Option<usize>,
}

/// Where and why a number's syntax broke, as a byte offset in the input.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Detail {
    Unexpected { found: char, at: usize },
    Missing { what: &'static str, at: usize },
}

impl SpecError {
    pub(super) fn new(kind: Kind) -> SpecError {
        SpecError { kind }
    }
}

impl Part {
    pub(super) fn at(text: &str, at: usize) -> Part {
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

/// What a number that ends early lacks, judged by its last byte.
pub(super) fn missing_at_end(text: &str) -> &'static str {
    match text.as_bytes().last() {
        Some(b'e' | b'E') => "exponent digits",
        Some(b'/') => "\"s\"",
        Some(b'+' | b'-') if text.len() > 1 => "exponent digits",
        _ => "digits",
    }
}

/// An `f64` for an error message: plain, or in `e` notation when that is
/// much shorter.
pub(super) fn f64_to_string(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e16 || x.abs() < 1e-6) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// `text`, cut to 40 characters for an error message.
pub(super) fn clip(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}...", &text[..cut]),
    }
}
