//! The etcd v3 API as tollgate speaks it: one generic unary call over
//! tonic, and the few messages sent and received by the keys of the kit
//! (read, put, watch) and by the Doorman election (`etcd` feature).
//!
//! # Implementation notes
//!
//! The messages are written by hand with prost's derive, field numbers
//! from etcd's `rpc.proto`, `kv.proto` and `v3election.proto`: they are
//! few and small, and this keeps the build free of `protoc`, which the
//! maintained `etcd-client` crate's build script needs. Response headers
//! and unused fields are left out where they are not read: prost skips
//! fields it does not know, and unset request fields keep etcd's defaults
//! (a single-key range, a put without a lease). A `oneof` of the protos is
//! written as its one optional member that is sent, which is the same on
//! the wire.

#![allow(missing_docs, unreachable_pub, clippy::derive_partial_eq_without_eq)]
// What the kit's own keys do not send is there for `etcd_wire`'s users.
#![cfg_attr(not(feature = "etcd-wire"), allow(dead_code))]

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// One unary call to etcd.
pub async fn unary<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::<Req, Resp>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub ttl: i64,
    #[prost(int64, tag = "2")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CampaignRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub lease: i64,
    #[prost(bytes = "vec", tag = "3")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaderKey {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub rev: i64,
    #[prost(int64, tag = "4")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CampaignResponse {
    #[prost(message, optional, tag = "2")]
    pub leader: Option<LeaderKey>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaderRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub lease: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaderResponse {
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// A key-value pair with the revision of its last change.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RevisionedKeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<RevisionedKeyValue>,
}

/// A `Compare` of a transaction, its `target_union` written as the
/// `create_revision` member (tag 5): `result` EQUAL is 0, `target` CREATE
/// is 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    #[prost(int32, tag = "1")]
    pub result: i32,
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    #[prost(int64, optional, tag = "5")]
    pub create_revision: Option<i64>,
}

impl Compare {
    /// True while `key` exists with create revision `revision`.
    pub fn created_at(key: Vec<u8>, revision: i64) -> Compare {
        Compare {
            result: 0,
            target: 1,
            key,
            create_revision: Some(revision),
        }
    }
}

/// A `RequestOp` with its `request_put` member (the `oneof`'s tag 2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(message, optional, tag = "2")]
    pub request_put: Option<PutRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
}

/// `WatchRequest` with its `create_request` member (the `oneof`'s tag 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    #[prost(message, optional, tag = "1")]
    pub create_request: Option<WatchCreateRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

/// `mvccpb.Event.EventType`'s `DELETE`; `PUT` is 0.
pub const EVENT_DELETE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<RevisionedKeyValue>,
}
