//! Exact decimals: the scanner that reads a number as written, the
//! fixed-point [`Unit`]s it is checked against, and the conversions from an
//! `f64` and back to text.
//!
//! # Implementation notes
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
//! `RateSpec::new` and `RateSpec::with_burst_ratio` take an `f64`, which is
//! already a binary approximation: [`round_scaled`] rounds its exact value
//! to the nearest unit (ties away from zero), splitting the float into
//! mantissa and exponent rather than multiplying in floating point.

/// A fixed-point quantity: the unit is 10^-`point`, and a valid value lies
/// between 10^`min_pow` and 10^`max_pow` units inclusive.
#[derive(Debug)]
pub(super) struct Unit {
    pub(super) point: u32,
    pub(super) min_pow: u32,
    pub(super) max_pow: u32,
}

/// Rates: nano-ops per second, 0.001 ..= 1e12 ops/s.
pub(super) const RATE: Unit = Unit {
    point: 9,
    min_pow: 6,
    max_pow: 21,
};

/// Burst ratios: parts per million, 1.0 ..= 1000.0.
pub(super) const RATIO: Unit = Unit {
    point: 6,
    min_pow: 6,
    max_pow: 9,
};

/// A decimal number as written: `±digits × 10^exp`, where `digits` has no
/// leading or trailing zeros.
#[derive(Debug)]
pub(super) struct Decimal {
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
pub(super) enum Reject {
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
pub(super) fn scan(text: &str, suffixes: bool) -> Result<Decimal, usize> {
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
    pub(super) fn to_fixed(&self, unit: &Unit) -> Result<u128, Reject> {
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

/// `x × scale` rounded to the nearest integer (ties away from zero),
/// computed exactly, for a finite `0 <= x < 2^53` and `scale < 2^64`.
pub(super) fn round_scaled(x: f64, scale: u128) -> u128 {
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

/// `value` units of 10^-`point` as a plain decimal, without trailing zeros.
pub(super) fn fixed_to_string(value: u128, point: u32) -> String {
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
pub(super) fn rate_to_string(nano: u128) -> String {
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
