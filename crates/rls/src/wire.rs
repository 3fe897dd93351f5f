//! The `ShouldRateLimit` messages read into and written from the domain
//! types directly, for the lean server's path (`grpc.rs`); the generated
//! types (`pb`) stay the reference.
//!
//! # Implementation notes
//!
//! Going through `pb` costs a call a set of generated structs on the way
//! in and on the way out, with their allocations and prost's length
//! passes, beside the domain types the service needs anyway. Here:
//!
//! * [`read_request`] fills a [`Request`] kept by the caller (a thread's),
//!   reusing its strings and vectors, from the protobuf wire format. It
//!   reads the common shape (each field once, unknown fields skipped) and
//!   gives up, returning `false`, on anything else: a field repeated that
//!   protobuf would merge, a group, a string that is not UTF-8, a
//!   truncated message. The caller then decodes through `pb`, whose
//!   answer (or error) is the reference.
//! * [`write_response`] writes a [`Response`] as `pb::RateLimitResponse`
//!   encodes it (fields in tag order, defaults left out), computing each
//!   nested message's length before writing it.
//!
//! Both are checked against prost on the same messages in the tests.

use std::time::Duration;

use prost::bytes::BufMut;
use prost::encoding::{encode_varint, encoded_len_varint};

use super::request::{Code, Descriptor, DescriptorStatus, Request, Response};

const VARINT: u64 = 0;
const I64: u64 = 1;
const LEN: u64 = 2;
const I32: u64 = 5;

/// A varint from the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(value);
        }
    }
    None
}

/// A length-delimited field's bytes from the front of `buf`.
fn bytes<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(buf)?).ok()?;
    let (field, rest) = (buf.get(..len)?, buf.get(len..)?);
    *buf = rest;
    Some(field)
}

/// The next field's number and wire type.
fn key(buf: &mut &[u8]) -> Option<(u64, u64)> {
    let key = varint(buf)?;
    let tag = key >> 3;
    (tag > 0).then_some((tag, key & 7))
}

/// Skips a field of wire type `wire` (no groups).
fn skip(buf: &mut &[u8], wire: u64) -> Option<()> {
    match wire {
        VARINT => varint(buf).map(drop),
        I64 => buf.get(8..).map(|rest| *buf = rest),
        LEN => bytes(buf).map(drop),
        I32 => buf.get(4..).map(|rest| *buf = rest),
        _ => None,
    }
}

/// Sets `out` to the UTF-8 text `raw`.
fn text(out: &mut String, raw: &[u8]) -> Option<()> {
    out.clear();
    out.push_str(std::str::from_utf8(raw).ok()?);
    Some(())
}

/// Reads `message` (a `RateLimitRequest`) into `request`, reusing its
/// room; `false` when the message is not of the common shape (see the
/// module's notes), leaving `request` unspecified.
pub(crate) fn read_request(mut message: &[u8], request: &mut Request) -> bool {
    request.domain.clear();
    request.hits_addend = 0;
    let mut used = 0;
    let mut seen = [false; 2];
    let read = (|| {
        while !message.is_empty() {
            match key(&mut message)? {
                (1, LEN) if !seen[0] => {
                    seen[0] = true;
                    text(&mut request.domain, bytes(&mut message)?)?;
                }
                (2, LEN) => {
                    let raw = bytes(&mut message)?;
                    if used == request.descriptors.len() {
                        request.descriptors.push(Descriptor::default());
                    }
                    read_descriptor(raw, &mut request.descriptors[used])?;
                    used += 1;
                }
                (3, VARINT) if !seen[1] => {
                    seen[1] = true;
                    request.hits_addend = varint(&mut message)? as u32;
                }
                (1..=3, _) => return None,
                (_, wire) => skip(&mut message, wire)?,
            }
        }
        Some(())
    })();
    request.descriptors.truncate(used);
    read.is_some()
}

fn read_descriptor(mut message: &[u8], d: &mut Descriptor) -> Option<()> {
    d.limit = None;
    d.hits_addend = None;
    let mut used = 0;
    let read = (|| {
        while !message.is_empty() {
            match key(&mut message)? {
                (1, LEN) => {
                    let raw = bytes(&mut message)?;
                    if used == d.entries.len() {
                        d.entries.push((String::new(), String::new()));
                    }
                    let (k, v) = &mut d.entries[used];
                    read_entry(raw, k, v)?;
                    used += 1;
                }
                (2, LEN) if d.limit.is_none() => {
                    let mut raw = bytes(&mut message)?;
                    let (mut limit, mut unit, mut seen) = (0u32, 0i32, [false; 2]);
                    while !raw.is_empty() {
                        match key(&mut raw)? {
                            (1, VARINT) if !seen[0] => {
                                seen[0] = true;
                                limit = varint(&mut raw)? as u32;
                            }
                            (2, VARINT) if !seen[1] => {
                                seen[1] = true;
                                unit = varint(&mut raw)? as i32;
                            }
                            (1 | 2, _) => return None,
                            (_, wire) => skip(&mut raw, wire)?,
                        }
                    }
                    d.limit = Some((limit, unit));
                }
                (3, LEN) if d.hits_addend.is_none() => {
                    let mut raw = bytes(&mut message)?;
                    let (mut hits, mut seen) = (0u64, false);
                    while !raw.is_empty() {
                        match key(&mut raw)? {
                            (1, VARINT) if !seen => {
                                seen = true;
                                hits = varint(&mut raw)?;
                            }
                            (1, _) => return None,
                            (_, wire) => skip(&mut raw, wire)?,
                        }
                    }
                    d.hits_addend = Some(hits);
                }
                (1..=3, _) => return None,
                (_, wire) => skip(&mut message, wire)?,
            }
        }
        Some(())
    })();
    d.entries.truncate(used);
    read
}

fn read_entry(mut message: &[u8], k: &mut String, v: &mut String) -> Option<()> {
    k.clear();
    v.clear();
    let mut seen = [false; 2];
    while !message.is_empty() {
        match key(&mut message)? {
            (1, LEN) if !seen[0] => {
                seen[0] = true;
                text(k, bytes(&mut message)?)?;
            }
            (2, LEN) if !seen[1] => {
                seen[1] = true;
                text(v, bytes(&mut message)?)?;
            }
            (1 | 2, _) => return None,
            (_, wire) => skip(&mut message, wire)?,
        }
    }
    Some(())
}

fn put_key(out: &mut impl BufMut, tag: u64, wire: u64) {
    encode_varint(tag << 3 | wire, out);
}

/// A varint field, left out when 0.
fn put_varint(out: &mut impl BufMut, tag: u64, value: u64) {
    if value != 0 {
        put_key(out, tag, VARINT);
        encode_varint(value, out);
    }
}

fn varint_len(tag: u64, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        encoded_len_varint(tag << 3) + encoded_len_varint(value)
    }
}

/// A string field, left out when empty.
fn put_str(out: &mut impl BufMut, tag: u64, s: &str) {
    if !s.is_empty() {
        put_key(out, tag, LEN);
        encode_varint(s.len() as u64, out);
        out.put_slice(s.as_bytes());
    }
}

fn str_len(tag: u64, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        nested_len(tag, s.len())
    }
}

/// A length-delimited field of `len` bytes, whole.
fn nested_len(tag: u64, len: usize) -> usize {
    encoded_len_varint(tag << 3) + encoded_len_varint(len as u64) + len
}

fn code(code: Code) -> u64 {
    match code {
        Code::Ok => 1,
        Code::OverLimit => 2,
    }
}

/// A protobuf int64 or int32 as a varint: negative numbers take ten bytes.
fn signed(v: i64) -> u64 {
    v as u64
}

fn duration_parts(d: Duration) -> (i64, i32) {
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        i32::try_from(d.subsec_nanos()).unwrap_or(0),
    )
}

fn duration_len(d: Duration) -> usize {
    let (s, n) = duration_parts(d);
    varint_len(1, signed(s)) + varint_len(2, signed(i64::from(n)))
}

/// `RateLimit`'s length: name (3), requests_per_unit (1), unit (2).
fn limit_len(s: &DescriptorStatus) -> Option<usize> {
    let l = s.current_limit.as_ref()?;
    Some(
        str_len(3, &l.name)
            + varint_len(1, u64::from(l.requests_per_unit))
            + varint_len(2, unit(l.unit)),
    )
}

fn unit(unit: super::Unit) -> u64 {
    u64::try_from(unit.wire()).unwrap_or(0)
}

fn status_len(s: &DescriptorStatus) -> usize {
    varint_len(1, code(s.code))
        + limit_len(s).map_or(0, |len| nested_len(2, len))
        + varint_len(3, u64::from(s.limit_remaining))
        + s.duration_until_reset
            .map_or(0, |d| nested_len(4, duration_len(d)))
}

/// Writes `response` as `pb::RateLimitResponse` encodes it.
pub(crate) fn write_response(response: &Response, out: &mut impl BufMut) {
    put_varint(out, 1, code(response.overall_code));
    for s in &response.statuses {
        put_key(out, 2, LEN);
        encode_varint(status_len(s) as u64, out);
        put_varint(out, 1, code(s.code));
        if let (Some(l), Some(len)) = (&s.current_limit, limit_len(s)) {
            put_key(out, 2, LEN);
            encode_varint(len as u64, out);
            put_varint(out, 1, u64::from(l.requests_per_unit));
            put_varint(out, 2, unit(l.unit));
            put_str(out, 3, &l.name);
        }
        put_varint(out, 3, u64::from(s.limit_remaining));
        if let Some(d) = s.duration_until_reset {
            put_key(out, 4, LEN);
            encode_varint(duration_len(d) as u64, out);
            let (secs, nanos) = duration_parts(d);
            put_varint(out, 1, signed(secs));
            put_varint(out, 2, signed(i64::from(nanos)));
        }
    }
    for (k, v) in &response.response_headers {
        put_key(out, 3, LEN);
        encode_varint((str_len(1, k) + str_len(2, v)) as u64, out);
        put_str(out, 1, k);
        put_str(out, 2, v);
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::super::pb;
    use super::super::pb::rate_limit_descriptor::{Entry, RateLimitOverride};
    use super::super::request::CurrentLimit;
    use super::super::Unit;
    use super::*;

    fn descriptor(entries: &[(&str, &str)]) -> pb::RateLimitDescriptor {
        pb::RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            limit: None,
            hits_addend: None,
        }
    }

    fn requests() -> Vec<pb::RateLimitRequest> {
        let mut with_all = descriptor(&[("remote_address", "10.0.0.1"), ("path", "/a/é")]);
        with_all.limit = Some(RateLimitOverride {
            requests_per_unit: 42,
            unit: 3,
        });
        with_all.hits_addend = Some(0);
        let mut big = descriptor(&[("k", &"v".repeat(300))]);
        big.hits_addend = Some(u64::MAX);
        big.limit = Some(RateLimitOverride {
            requests_per_unit: 0,
            unit: 0,
        });
        vec![
            pb::RateLimitRequest::default(),
            pb::RateLimitRequest {
                domain: "edge".into(),
                descriptors: vec![descriptor(&[("remote_address", "v1")])],
                hits_addend: 0,
            },
            pb::RateLimitRequest {
                domain: "edge".into(),
                descriptors: vec![
                    with_all,
                    descriptor(&[]),
                    big,
                    descriptor(&[("", ""), ("a", "")]),
                ],
                hits_addend: 7,
            },
        ]
    }

    #[test]
    fn requests_read_as_prost_decodes_them_reusing_one_request() {
        let mut request = Request::default();
        // Largest first, so that the smaller ones reuse (and must clear)
        // its room.
        for pb in requests().into_iter().rev() {
            let bytes = pb.encode_to_vec();
            assert!(read_request(&bytes, &mut request), "{pb:?}");
            assert_eq!(request, Request::from(pb));
        }
    }

    #[test]
    fn unknown_fields_are_skipped() {
        let pb = requests().swap_remove(2);
        let mut bytes = pb.encode_to_vec();
        // Field 9 as a varint, an 8-byte, a length-delimited and a 4-byte
        // value.
        bytes.extend_from_slice(&[9 << 3, 0x96, 0x01]);
        bytes.extend_from_slice(&[9 << 3 | 1, 1, 2, 3, 4, 5, 6, 7, 8]);
        bytes.extend_from_slice(&[9 << 3 | 2, 2, b'h', b'i']);
        bytes.extend_from_slice(&[9 << 3 | 5, 1, 2, 3, 4]);
        let mut request = Request::default();
        assert!(read_request(&bytes, &mut request));
        assert_eq!(request, Request::from(pb));
    }

    #[test]
    fn what_protobuf_would_merge_or_refuse_is_left_to_prost() {
        let mut request = Request::default();
        let one = requests().swap_remove(1).encode_to_vec();
        // The domain twice: prost keeps the last.
        let twice = [one.clone(), one.clone()].concat();
        assert!(!read_request(&twice, &mut request));
        // A truncated message, a string that is not UTF-8, a group.
        assert!(!read_request(&one[..one.len() - 1], &mut request));
        assert!(!read_request(&[10, 1, 0xff], &mut request));
        assert!(!read_request(&[9 << 3 | 3], &mut request));
        // Every one of them prost also refuses or merges.
        assert!(pb::RateLimitRequest::decode(&one[..one.len() - 1]).is_err());
        assert!(pb::RateLimitRequest::decode(&[10u8, 1, 0xff][..]).is_err());
    }

    fn status(code: Code, name: &str, unit: Unit, remaining: u32, reset: u64) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: Some(CurrentLimit {
                name: name.into(),
                requests_per_unit: remaining * 3,
                unit,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration::from_secs(reset)),
        }
    }

    #[test]
    fn responses_are_written_as_prost_encodes_them() {
        let responses = [
            Response {
                overall_code: Code::Ok,
                statuses: vec![status(Code::Ok, "", Unit::Second, 999_999_999, 1)],
                response_headers: Vec::new(),
            },
            Response {
                overall_code: Code::OverLimit,
                statuses: vec![
                    status(Code::OverLimit, "per-ip", Unit::Week, 0, 604_800),
                    DescriptorStatus::no_limit(),
                    DescriptorStatus {
                        code: Code::Ok,
                        current_limit: None,
                        limit_remaining: u32::MAX,
                        duration_until_reset: Some(Duration::from_nanos(1_500_000_000)),
                    },
                    status(Code::Ok, &"n".repeat(200), Unit::Minute, 0, 0),
                ],
                response_headers: vec![
                    ("RateLimit-Limit".into(), "3".into()),
                    (String::new(), String::new()),
                ],
            },
        ];
        for r in responses {
            let mut ours = Vec::new();
            write_response(&r, &mut ours);
            assert_eq!(
                ours,
                pb::RateLimitResponse::from(r.clone()).encode_to_vec(),
                "{r:?}"
            );
        }
    }
}
