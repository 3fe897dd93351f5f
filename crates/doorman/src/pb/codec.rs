//! The gRPC codec: prost, plus the proto2 check that required fields are
//! present.
//!
//! # Implementation notes
//!
//! prost decodes a missing proto2 `required` scalar as its zero value, so a
//! request without `wants` or `priority` would read as "wants 0, priority
//! 0". Go's Doorman rejects such a message. This codec first walks the
//! encoded request's fields (and those of each resource in it) to see which
//! required ones are present, then decodes it into the real type. A missing
//! field is answered INVALID_ARGUMENT through `RequestError::MissingField`.
//! The walk is written by hand, over prost's wire primitives, because a
//! second prost decode into a shadow type with `optional` fields allocated
//! a vector and a string per resource on every GetCapacity; the tests keep
//! that shadow decode as the walk's reference. A message the walk cannot
//! read (truncated, a group, a known field of the wrong wire type, a
//! resource id that is not UTF-8) is left to the real decoder to report.
//!
//! Only requests carry checks ([`Required`]); every other message passes
//! as is.

use std::marker::PhantomData;

use prost::bytes::Buf as _;
use prost::encoding::{decode_key, decode_varint, WireType};
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::error::RequestError;

/// A message whose required fields are checked on the wire.
pub trait Required: Message + Default {
    /// Checks that the encoded message `bytes` carries every required
    /// field the server relies on.
    ///
    /// # Errors
    ///
    /// The first missing field.
    fn check_required(_bytes: &[u8]) -> Result<(), RequestError> {
        Ok(())
    }
}

/// Calls `each` with the tag and wire type of each field of the encoded
/// message `buf`, and its bytes when it is length-delimited (else none);
/// `None` when `buf` does not parse as fields or `each` refuses one.
fn walk<'a>(
    mut buf: &'a [u8],
    mut each: impl FnMut(u32, WireType, &'a [u8]) -> Option<()>,
) -> Option<()> {
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        let bytes: &'a [u8] = match wire {
            WireType::Varint => {
                decode_varint(&mut buf).ok()?;
                &[]
            }
            WireType::SixtyFourBit => {
                buf = buf.get(8..)?;
                &[]
            }
            WireType::ThirtyTwoBit => {
                buf = buf.get(4..)?;
                &[]
            }
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let bytes = buf.get(..len)?;
                buf = &buf[len..];
                bytes
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        each(tag, wire, bytes)?;
    }
    Some(())
}

/// Which of the scalar fields `wanted` (tag and wire type) the encoded
/// message `buf` carries, as bits in their order, with its resource id
/// (field 1, a string; empty when absent); `None` when it does not parse.
fn present<'a>(buf: &'a [u8], wanted: &[(u32, WireType)]) -> Option<(u32, &'a str)> {
    let mut seen = 0;
    let mut id = "";
    walk(buf, |tag, wire, bytes| {
        if tag == 1 {
            if wire != WireType::LengthDelimited {
                return None;
            }
            id = std::str::from_utf8(bytes).ok()?;
        }
        if let Some(i) = wanted.iter().position(|&(t, _)| t == tag) {
            if wanted[i].1 != wire {
                return None;
            }
            seen |= 1 << i;
        }
        Some(())
    })?;
    Some((seen, id))
}

/// Calls `each` with the bytes of each occurrence of the repeated message
/// field `tag` in the encoded message `buf`; `None` when it does not parse.
fn each_message<'a>(
    buf: &'a [u8],
    tag: u32,
    mut each: impl FnMut(&'a [u8]) -> Option<()>,
) -> Option<()> {
    walk(buf, |t, wire, bytes| match (t == tag, wire) {
        (false, _) => Some(()),
        (true, WireType::LengthDelimited) => each(bytes),
        (true, _) => None,
    })
}

/// The first required field missing from the encoded `buf` (a message
/// whose resources are the repeated field 2), or none; a message that does
/// not parse is left to the real decoder.
fn first_missing(
    buf: &[u8],
    check: impl Fn(&[u8]) -> Option<Result<(), RequestError>>,
) -> Result<(), RequestError> {
    let mut found = Ok(());
    // Every resource is walked, past a missing field too: one that does
    // not parse leaves the whole message to the real decoder.
    let walked = each_message(buf, 2, |resource| {
        let checked = check(resource)?;
        if found.is_ok() {
            found = checked;
        }
        Some(())
    });
    match walked {
        Some(()) => found,
        None => Ok(()),
    }
}

fn missing(resource: &str, field: &'static str) -> RequestError {
    RequestError::MissingField {
        resource: resource.to_owned(),
        field,
    }
}

impl Required for super::GetCapacityRequest {
    fn check_required(bytes: &[u8]) -> Result<(), RequestError> {
        // ResourceRequest: priority = 2 (int64), wants = 4 (double).
        const WANTED: [(u32, WireType); 2] = [(2, WireType::Varint), (4, WireType::SixtyFourBit)];
        first_missing(bytes, |resource| {
            let (seen, id) = present(resource, &WANTED)?;
            Some(match seen {
                0b11 => Ok(()),
                0b10 | 0b00 => Err(missing(id, "priority")),
                _ => Err(missing(id, "wants")),
            })
        })
    }
}

impl Required for super::GetServerCapacityRequest {
    fn check_required(bytes: &[u8]) -> Result<(), RequestError> {
        // PriorityBandAggregate: priority = 1, num_clients = 2 (int64),
        // wants = 3 (double); a resource's bands are its field 3.
        const WANTED: [(u32, WireType); 3] = [
            (1, WireType::Varint),
            (2, WireType::Varint),
            (3, WireType::SixtyFourBit),
        ];
        first_missing(bytes, |resource| {
            let (_, id) = present(resource, &[])?;
            let mut found = Ok(());
            each_message(resource, 3, |band| {
                let mut seen = 0;
                walk(band, |tag, wire, _| {
                    if let Some(i) = WANTED.iter().position(|&(t, _)| t == tag) {
                        if WANTED[i].1 != wire {
                            return None;
                        }
                        seen |= 1 << i;
                    }
                    Some(())
                })?;
                if found.is_ok() {
                    found = match (seen & 1, seen & 2, seen & 4) {
                        (0, _, _) => Err("wants.priority"),
                        (_, 0, _) => Err("wants.num_clients"),
                        (_, _, 0) => Err("wants.wants"),
                        _ => Ok(()),
                    };
                }
                Some(())
            })?;
            // The id is the resource's last, as prost reads it.
            Some(found.map_err(|field| missing(id, field)))
        })
    }
}

impl Required for super::DiscoveryRequest {}
impl Required for super::DiscoveryResponse {}
impl Required for super::GetCapacityResponse {}
impl Required for super::GetServerCapacityResponse {}
impl Required for super::ReleaseCapacityRequest {}
impl Required for super::ReleaseCapacityResponse {}

/// prost encoding and decoding, with [`Required`] checks on decode.
#[derive(Debug, Clone)]
pub struct Checked<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for Checked<T, U> {
    fn default() -> Self {
        Checked { _pd: PhantomData }
    }
}

impl<T, U> Codec for Checked<T, U>
where
    T: Message + Send + 'static,
    U: Required + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = CheckedEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        CheckedEncoder { _pd: PhantomData }
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder { _pd: PhantomData }
    }
}

/// Encodes `T` with prost.
#[derive(Debug)]
pub struct CheckedEncoder<T> {
    _pd: PhantomData<T>,
}

impl<T: Message> Encoder for CheckedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(buf)
            .map_err(|e| Status::internal(format!("cannot encode: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Checks and decodes a `U` from `bytes`: a missing required field is
/// INVALID_ARGUMENT and, as tonic's prost codec answers it, a message that
/// does not parse INTERNAL.
///
/// # Errors
///
/// The status to answer the request with.
pub fn decode<U: Required>(bytes: prost::bytes::Bytes) -> Result<U, Status> {
    U::check_required(&bytes).map_err(Status::from)?;
    U::decode(bytes).map_err(|e| Status::internal(e.to_string()))
}

/// Checks and decodes `U`.
#[derive(Debug)]
pub struct CheckedDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: Required> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        decode(buf.copy_to_bytes(buf.remaining())).map(Some)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{
        GetCapacityRequest, GetServerCapacityRequest, PriorityBandAggregate, ResourceRequest,
    };
    use proptest::prelude::*;

    // The reference: prost decoding into shadow types whose required
    // fields are `optional`, so their absence shows.

    /// `ResourceRequest` as far as presence goes.
    #[derive(Clone, PartialEq, Message)]
    struct ResourcePresence {
        #[prost(string, optional, tag = "1")]
        resource_id: Option<String>,
        #[prost(int64, optional, tag = "2")]
        priority: Option<i64>,
        #[prost(double, optional, tag = "4")]
        wants: Option<f64>,
    }

    /// `GetCapacityRequest` as far as presence goes.
    #[derive(Clone, PartialEq, Message)]
    struct GetCapacityPresence {
        #[prost(message, repeated, tag = "2")]
        resource: Vec<ResourcePresence>,
    }

    /// A `GetCapacityRequest` to encode, with its fields optional.
    #[derive(Clone, PartialEq, Message)]
    struct GetCapacityParts {
        #[prost(string, optional, tag = "1")]
        client_id: Option<String>,
        #[prost(message, repeated, tag = "2")]
        resource: Vec<ResourcePresence>,
    }

    /// `PriorityBandAggregate` as far as presence goes.
    #[derive(Clone, PartialEq, Message)]
    struct BandPresence {
        #[prost(int64, optional, tag = "1")]
        priority: Option<i64>,
        #[prost(int64, optional, tag = "2")]
        num_clients: Option<i64>,
        #[prost(double, optional, tag = "3")]
        wants: Option<f64>,
    }

    /// `ServerCapacityResourceRequest` as far as presence goes.
    #[derive(Clone, PartialEq, Message)]
    struct ServerResourcePresence {
        #[prost(string, optional, tag = "1")]
        resource_id: Option<String>,
        #[prost(message, repeated, tag = "3")]
        wants: Vec<BandPresence>,
    }

    /// `GetServerCapacityRequest` as far as presence goes.
    #[derive(Clone, PartialEq, Message)]
    struct GetServerCapacityPresence {
        #[prost(message, repeated, tag = "2")]
        resource: Vec<ServerResourcePresence>,
    }

    fn reference_missing(resource: &Option<String>, field: &'static str) -> RequestError {
        missing(resource.as_deref().unwrap_or_default(), field)
    }

    fn reference_capacity(bytes: &[u8]) -> Result<(), RequestError> {
        let Ok(shadow) = GetCapacityPresence::decode(bytes) else {
            return Ok(());
        };
        for r in &shadow.resource {
            if r.priority.is_none() {
                return Err(reference_missing(&r.resource_id, "priority"));
            }
            if r.wants.is_none() {
                return Err(reference_missing(&r.resource_id, "wants"));
            }
        }
        Ok(())
    }

    fn reference_server_capacity(bytes: &[u8]) -> Result<(), RequestError> {
        let Ok(shadow) = GetServerCapacityPresence::decode(bytes) else {
            return Ok(());
        };
        for r in &shadow.resource {
            for band in &r.wants {
                if band.priority.is_none() {
                    return Err(reference_missing(&r.resource_id, "wants.priority"));
                }
                if band.num_clients.is_none() {
                    return Err(reference_missing(&r.resource_id, "wants.num_clients"));
                }
                if band.wants.is_none() {
                    return Err(reference_missing(&r.resource_id, "wants.wants"));
                }
            }
        }
        Ok(())
    }

    fn resource() -> impl Strategy<Value = ResourcePresence> {
        (
            proptest::option::of("[a-c]{0,2}"),
            proptest::option::of(-2i64..3),
            proptest::option::of(0.0..2.0f64),
        )
            .prop_map(|(resource_id, priority, wants)| ResourcePresence {
                resource_id,
                priority,
                wants,
            })
    }

    fn band() -> impl Strategy<Value = BandPresence> {
        (
            proptest::option::of(-2i64..3),
            proptest::option::of(0i64..3),
            proptest::option::of(0.0..2.0f64),
        )
            .prop_map(|(priority, num_clients, wants)| BandPresence {
                priority,
                num_clients,
                wants,
            })
    }

    /// An encoded message, sometimes cut short or with a byte changed.
    fn mangled(bytes: Vec<u8>, cut: usize, flip: Option<(usize, u8)>) -> Vec<u8> {
        let mut bytes = bytes;
        if let Some((at, to)) = flip {
            if !bytes.is_empty() {
                let at = at % bytes.len();
                bytes[at] = to;
            }
        }
        let keep = bytes.len().saturating_sub(cut);
        bytes.truncate(keep);
        bytes
    }

    proptest! {
        /// The field walk finds what the shadow decode finds, on whole
        /// messages and on cut or corrupted ones.
        #[test]
        fn the_walk_agrees_with_a_shadow_decode(
            client_id in proptest::option::of("[a-c]{0,3}"),
            resources in proptest::collection::vec(resource(), 0..4),
            cut in prop_oneof![Just(0usize), 0usize..6],
            flip in proptest::option::of((0usize..64, any::<u8>())),
        ) {
            let message = GetCapacityParts { client_id, resource: resources }.encode_to_vec();
            let bytes = mangled(message, cut, flip);
            prop_assert_eq!(
                GetCapacityRequest::check_required(&bytes),
                reference_capacity(&bytes)
            );
        }

        #[test]
        fn the_server_walk_agrees_with_a_shadow_decode(
            resources in proptest::collection::vec(
                (proptest::option::of("[a-c]{0,2}"), proptest::collection::vec(band(), 0..3)),
                0..3,
            ),
            cut in prop_oneof![Just(0usize), 0usize..6],
            flip in proptest::option::of((0usize..64, any::<u8>())),
        ) {
            let message = GetServerCapacityPresence {
                resource: resources
                    .into_iter()
                    .map(|(resource_id, wants)| ServerResourcePresence { resource_id, wants })
                    .collect(),
            }
            .encode_to_vec();
            let bytes = mangled(message, cut, flip);
            prop_assert_eq!(
                GetServerCapacityRequest::check_required(&bytes),
                reference_server_capacity(&bytes)
            );
        }
    }

    fn request(priority: Option<i64>, wants: Option<f64>) -> Vec<u8> {
        // Encode with the shadow, which can leave fields out.
        GetCapacityPresence {
            resource: vec![ResourcePresence {
                resource_id: Some("r".into()),
                priority,
                wants,
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn missing_wants_or_priority_is_refused() {
        assert_eq!(
            GetCapacityRequest::check_required(&request(Some(0), None)),
            Err(RequestError::MissingField {
                resource: "r".into(),
                field: "wants"
            })
        );
        assert_eq!(
            GetCapacityRequest::check_required(&request(None, Some(1.0))),
            Err(RequestError::MissingField {
                resource: "r".into(),
                field: "priority"
            })
        );
        assert_eq!(
            GetCapacityRequest::check_required(&request(Some(0), Some(0.0))),
            Ok(())
        );
    }

    #[test]
    fn zero_values_of_the_real_type_are_present() {
        // prost encodes required fields even when zero.
        let real = GetCapacityRequest {
            client_id: "c".into(),
            resource: vec![ResourceRequest {
                resource_id: "r".into(),
                priority: 0,
                has: None,
                wants: 0.0,
            }],
        };
        assert_eq!(
            GetCapacityRequest::check_required(&real.encode_to_vec()),
            Ok(())
        );
        let band = PriorityBandAggregate {
            priority: 0,
            num_clients: 1,
            wants: 0.0,
        };
        assert!(!band.encode_to_vec().is_empty());
    }
}
