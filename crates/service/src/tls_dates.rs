//! A certificate's validity dates, read from its DER encoding, so that a
//! server can say at start that its certificate has expired (or is not
//! valid yet) rather than leave each client to refuse it.
//!
//! # Implementation notes
//!
//! Only the path to `validity` is walked: a certificate is
//! `SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
//! serialNumber INTEGER, signature SEQUENCE, issuer SEQUENCE, validity
//! SEQUENCE { notBefore Time, notAfter Time }, ... }, ... }` (RFC 5280
//! §4.1), each a DER tag, a length and its contents. A Time is a UTCTime
//! (`YYMMDDHHMMSSZ`, years 1950 to 2049) or a GeneralizedTime
//! (`YYYYMMDDHHMMSSZ`). Anything else reads as "no dates": rustls, which
//! checks the certificate itself, has the last word.

use std::fmt;

/// A moment of a certificate's validity, to the second, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Moment {
    /// Seconds since the Unix epoch (negative before it).
    pub(crate) unix: i64,
    fields: [u32; 6],
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [y, mo, d, h, mi, s] = self.fields;
        write!(f, "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
    }
}

/// A certificate's `notBefore` and `notAfter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: Moment,
    pub(crate) not_after: Moment,
}

/// One DER element at the start of `der`: its tag, its contents and what
/// follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The validity dates of the DER certificate `der`, if it reads as one.
pub(crate) fn validity(der: &[u8]) -> Option<Validity> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == VERSION {
        rest = after;
    }
    let (INTEGER, _, rest) = element(rest)? else {
        return None;
    };
    let (SEQUENCE, _, rest) = element(rest)? else {
        return None;
    };
    let (SEQUENCE, _, rest) = element(rest)? else {
        return None;
    };
    let (SEQUENCE, validity, _) = element(rest)? else {
        return None;
    };
    let (tag, before, rest) = element(validity)?;
    let not_before = time(tag, before)?;
    let (tag, after, _) = element(rest)?;
    let not_after = time(tag, after)?;
    Some(Validity {
        not_before,
        not_after,
    })
}

/// A UTCTime or GeneralizedTime in UTC (`Z`), without fractions.
fn time(tag: u8, text: &[u8]) -> Option<Moment> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: u32 = text[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| rest[i..i + 2].parse::<u32>().ok();
    let fields = [year, field(0)?, field(2)?, field(4)?, field(6)?, field(8)?];
    let [_, month, day, hour, minute, second] = fields;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let unix = days * 86_400
        + i64::from(hour) * 3_600
        + i64::from(minute) * 60
        + i64::from(second.min(60));
    Some(Moment { unix, fields })
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_unix_seconds() {
        let t = time(UTC_TIME, b"700101000000Z").unwrap();
        assert_eq!(t.unix, 0);
        assert_eq!(t.to_string(), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            time(UTC_TIME, b"491231235959Z").unwrap().unix,
            2_524_607_999
        );
        assert_eq!(time(UTC_TIME, b"500101000000Z").unwrap().unix, -631_152_000);
        let g = time(GENERALIZED_TIME, b"20240229120000Z").unwrap();
        assert_eq!(g.unix, 1_709_208_000);
        assert_eq!(g.to_string(), "2024-02-29 12:00:00 UTC");
        assert_eq!(time(UTC_TIME, b"700101000000"), None);
        assert_eq!(time(UTC_TIME, b"20240229120000Z"), None);
        assert_eq!(time(GENERALIZED_TIME, b"20241329120000Z"), None);
    }

    #[test]
    fn junk_has_no_dates() {
        assert_eq!(validity(&[]), None);
        assert_eq!(validity(&[0x30, 0x82, 0xff]), None);
        assert_eq!(validity(&[0x30, 0x03, 0x02, 0x01, 0x00]), None);
    }
}
