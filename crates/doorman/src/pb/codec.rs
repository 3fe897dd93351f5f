//! The gRPC codec: prost, plus the proto2 check that required fields are
//! present.
//!
//! # Implementation notes
//!
//! prost decodes a missing proto2 `required` scalar as its zero value, so a
//! request without `wants` or `priority` would read as "wants 0, priority
//! 0". Go's Doorman rejects such a message. This codec decodes each
//! incoming message twice: first into a small shadow message that declares
//! the fields to check as `optional` (so absence is visible, and every
//! other field is skipped as unknown), then into the real type. A missing
//! field is answered INVALID_ARGUMENT through
//! `RequestError::MissingField`. Doorman messages are small (the server
//! caps them), so the second pass costs little.
//!
//! Only requests carry checks ([`Required`]); every other message passes
//! as is.

use std::marker::PhantomData;

use prost::bytes::Buf as _;
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

fn missing(resource: &Option<String>, field: &'static str) -> RequestError {
    RequestError::MissingField {
        resource: resource.clone().unwrap_or_default(),
        field,
    }
}

/// A message that does not decode is left to the real decoder to report.
fn shadow<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    M::decode(bytes).ok()
}

impl Required for super::GetCapacityRequest {
    fn check_required(bytes: &[u8]) -> Result<(), RequestError> {
        let Some(shadow) = shadow::<GetCapacityPresence>(bytes) else {
            return Ok(());
        };
        for r in &shadow.resource {
            if r.priority.is_none() {
                return Err(missing(&r.resource_id, "priority"));
            }
            if r.wants.is_none() {
                return Err(missing(&r.resource_id, "wants"));
            }
        }
        Ok(())
    }
}

impl Required for super::GetServerCapacityRequest {
    fn check_required(bytes: &[u8]) -> Result<(), RequestError> {
        let Some(shadow) = shadow::<GetServerCapacityPresence>(bytes) else {
            return Ok(());
        };
        for r in &shadow.resource {
            for band in &r.wants {
                if band.priority.is_none() {
                    return Err(missing(&r.resource_id, "wants.priority"));
                }
                if band.num_clients.is_none() {
                    return Err(missing(&r.resource_id, "wants.num_clients"));
                }
                if band.wants.is_none() {
                    return Err(missing(&r.resource_id, "wants.wants"));
                }
            }
        }
        Ok(())
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
    use super::super::{GetCapacityRequest, PriorityBandAggregate, ResourceRequest};
    use super::*;

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
