//! Generated protobuf messages and gRPC stubs for `proto/doorman/doorman.proto`.
//!
//! Quarantined: the generated code lives only here, with its lint allowances,
//! and the rest of the crate talks in domain types: the server converts at its
//! edge (`server::wire`), and both sides convert times with `to_wire_secs`
//! and `from_wire_secs` below. With the `wire` feature the module is
//! public, for tools and tests that speak the wire protocol themselves
//! (the `tollgate load` command, the integration tests); its types follow
//! the `.proto`, not the crate's domain types.

// The stubs the crate does not call itself are there for `wire`'s users.
#![cfg_attr(not(feature = "wire"), allow(dead_code))]
#![allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]

tonic::include_proto!("doorman");

pub mod codec;

use std::time::Duration;

/// A duration or a Unix time as wire seconds (`expiry_time`,
/// `refresh_interval`, `lease_length`): whole seconds, the fraction dropped,
/// saturating at `i64::MAX`.
///
/// The one conversion to the wire; [`from_wire_secs`] is its inverse.
pub(crate) fn to_wire_secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Wire seconds as a duration or a Unix time; a negative value reads as 0.
// The server's alone.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn from_wire_secs(secs: i64) -> Duration {
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_seconds_saturate() {
        assert_eq!(to_wire_secs(Duration::from_millis(2_999)), 2);
        assert_eq!(to_wire_secs(Duration::MAX), i64::MAX);
        assert_eq!(to_wire_secs(Duration::from_secs(1 << 63)), i64::MAX);
        assert_eq!(from_wire_secs(5), Duration::from_secs(5));
        assert_eq!(from_wire_secs(-5), Duration::ZERO);
        assert_eq!(
            from_wire_secs(i64::MAX),
            Duration::from_secs(i64::MAX as u64)
        );
    }
}
