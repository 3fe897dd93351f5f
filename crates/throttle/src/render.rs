//! How [`ThrottleLayer`](crate::ThrottleLayer) answers: rejections as
//! HTTP or gRPC responses, and the rate-limit fields and warnings on
//! admitted ones.
//!
//! # Implementation notes
//!
//! Plain HTTP gets 429 or 503 with `retry-after` in whole seconds
//! (rounded up); a gRPC request (`content-type: application/grpc*`)
//! gets a trailers-only response, HTTP 200 with `grpc-status`
//! (`RESOURCE_EXHAUSTED` or `UNAVAILABLE`), `grpc-message`, the same
//! `retry-after` as metadata, and, when a retry time is known, a
//! `google.rpc.Status` holding a `google.rpc.RetryInfo` with the exact
//! delay in `grpc-status-details-bin` (what gRPC clients' retry support
//! reads).
//!
//! Every 429 and 503 carries `retry-after`, in whole seconds rounded up.
//! A cost no rule or queue can ever admit gets 413 (gRPC
//! `INVALID_ARGUMENT`) and a request without a key a rule requires gets
//! 400 (gRPC `INVALID_ARGUMENT`), without `retry-after`: retrying either
//! unchanged never succeeds.
//!
//! Rules with headers on ([`Rule::ratelimit_headers`](crate::Rule::ratelimit_headers),
//! or [`ThrottlerBuilder::ratelimit_headers`](crate::ThrottlerBuilder::ratelimit_headers)
//! for all) add the fields of draft-ietf-httpapi-ratelimit-headers-09 to
//! admitted and refused responses alike (as gRPC metadata, for gRPC): one
//! list member per rule that decided the request, named after the rule,
//!
//! ```text
//! ratelimit-policy: "per-key";q=10;w=2
//! ratelimit: "per-key";r=7;t=1
//! ```
//!
//! where `q` is the rule's quota (what a fresh key may spend at once), `w`
//! the seconds it applies over (a window, or the time a bucket takes to
//! refill it), `r` what the key may still spend at once and `t` the
//! seconds until it holds its whole quota again, all rounded up.
//!
//! An admitted request over a soft limit gets `ratelimit-limit`,
//! `ratelimit-remaining` and `ratelimit-warning` headers on its response.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Response};

use super::decision::Permit;
use super::outcome::{LimitStatus, Rejection};

/// The response to a rejected request: gRPC's when `grpc`, plain HTTP's
/// otherwise.
pub(crate) fn rejected<B: Default>(rejection: &Rejection, grpc: bool) -> Response<B> {
    let mut response = if grpc {
        let message = rejection.to_string();
        let mut response: Response<B> =
            tonic::Status::with_details(rejection.grpc_code(), &message, status_details(rejection))
                .into_http();
        // Only what must be escaped, so the message stays readable.
        if let Ok(message) = HeaderValue::from_str(&grpc_message(&message)) {
            response
                .headers_mut()
                .insert(HeaderName::from_static("grpc-message"), message);
        }
        response
    } else {
        let mut response = Response::new(B::default());
        *response.status_mut() = rejection.http_status();
        response
    };
    if let Some(after) = rejection.retry_after() {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(secs_up(after)),
        );
    }
    ratelimit_fields(rejection.limits(), response.headers_mut());
    response
}

/// Whole seconds, rounded up.
fn secs_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

/// The `RateLimit-Policy` and `RateLimit` fields for `limits` (see the
/// module notes); nothing when there are none.
pub(crate) fn ratelimit_fields(limits: &[LimitStatus], headers: &mut HeaderMap) {
    use std::fmt::Write as _;
    if limits.is_empty() {
        return;
    }
    let (mut policy, mut standing) = (String::new(), String::new());
    for (i, l) in limits.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let name = sf_string(&l.rule);
        let _ = write!(
            policy,
            "{sep}{name};q={};w={}",
            l.quota,
            secs_up(l.window).max(1)
        );
        let _ = write!(
            standing,
            "{sep}{name};r={};t={}",
            l.remaining,
            secs_up(l.reset)
        );
    }
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", standing)] {
        if let Ok(v) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
}

/// A structured-field string (RFC 9651): quoted, `"` and `\` escaped, and
/// anything outside printable ASCII replaced by `?`.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

/// Percent-encodes a gRPC message (everything outside printable ASCII,
/// and `%`).
fn grpc_message(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `google.rpc.Status`, sent in `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The rich status of a gRPC rejection: a `google.rpc.RetryInfo` with the
/// exact retry delay when there is one (the `retry-after` metadata has
/// whole seconds only), nothing otherwise.
fn status_details(rejection: &Rejection) -> prost::bytes::Bytes {
    use prost::Message as _;
    let Some(after) = rejection.retry_after() else {
        return prost::bytes::Bytes::new();
    };
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(after.subsec_nanos()).unwrap_or(0),
        }),
    };
    let status = RpcStatus {
        code: rejection.grpc_code() as i32,
        message: rejection.to_string(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".to_owned(),
            value: retry.encode_to_vec(),
        }],
    };
    status.encode_to_vec().into()
}

/// The first soft limit an admitted request went over, as headers on its
/// response.
pub(crate) fn warn<B>(permit: &Permit, response: &mut Response<B>) {
    let Some(w) = permit.warnings().first() else {
        return;
    };
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("ratelimit-limit"),
        HeaderValue::from(w.limit),
    );
    headers.insert(
        HeaderName::from_static("ratelimit-remaining"),
        HeaderValue::from(w.remaining),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("soft limit of rule \"{}\" exceeded", w.rule)) {
        headers.insert(HeaderName::from_static("ratelimit-warning"), v);
    }
}
