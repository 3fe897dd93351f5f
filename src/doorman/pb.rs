//! Generated protobuf messages and gRPC stubs for `proto/doorman/doorman.proto`.
//!
//! Quarantined: the generated code lives only here, with its lint allowances,
//! and the rest of the crate talks in domain types through the `From`
//! conversions below. The module is public only so the `tollgate` binary and
//! the integration tests can speak the wire protocol; it is hidden from the
//! docs and not part of the stable API.

#![allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]

tonic::include_proto!("doorman");

pub mod codec;

use super::algorithm::{AlgorithmConfig, Kind};
use super::lease::ClientLease;

impl From<Kind> for algorithm::Kind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::NoAlgorithm => algorithm::Kind::NoAlgorithm,
            Kind::Static => algorithm::Kind::Static,
            Kind::ProportionalShare => algorithm::Kind::ProportionalShare,
            Kind::FairShare => algorithm::Kind::FairShare,
        }
    }
}

impl From<algorithm::Kind> for Kind {
    fn from(kind: algorithm::Kind) -> Self {
        match kind {
            algorithm::Kind::NoAlgorithm => Kind::NoAlgorithm,
            algorithm::Kind::Static => Kind::Static,
            algorithm::Kind::ProportionalShare => Kind::ProportionalShare,
            algorithm::Kind::FairShare => Kind::FairShare,
        }
    }
}

/// Whole seconds, saturating at `i64::MAX`.
fn secs(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl From<&AlgorithmConfig> for Algorithm {
    fn from(algo: &AlgorithmConfig) -> Self {
        Algorithm {
            kind: algorithm::Kind::from(algo.kind) as i32,
            lease_length: secs(algo.lease_length),
            refresh_interval: secs(algo.refresh_interval),
            parameters: algo
                .parameters
                .iter()
                .map(|(name, value)| NamedParameter {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            learning_mode_duration: algo.learning_mode_duration.map(secs),
        }
    }
}

impl From<&ClientLease> for Lease {
    /// The lease as sent to a client: expiry in Unix seconds (the server's
    /// timestamps are Unix time), refresh interval in seconds.
    fn from(lease: &ClientLease) -> Self {
        Lease {
            expiry_time: secs(lease.expiry),
            refresh_interval: secs(lease.refresh_interval),
            capacity: lease.has,
        }
    }
}

impl From<&super::election::Mastership> for Mastership {
    fn from(m: &super::election::Mastership) -> Self {
        Mastership {
            master_address: m.master_address.clone(),
        }
    }
}
