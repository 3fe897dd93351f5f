//! `tollgate load --mode rls`: many concurrent ShouldRateLimit calls
//! against a rate limit service, each with some descriptors of one entry
//! whose values cycle through a number of distinct ones, reporting calls/s,
//! overall codes, latency percentiles and CPU time per call. Every request
//! body is encoded once before the run; the calls go through
//! `load_wire.rs`.

use prost::Message as _;
use tollgate_rls::pb::rate_limit_descriptor::Entry;
use tollgate_rls::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tollgate_rls::SHOULD_RATE_LIMIT_PATH;

use crate::load_wire::{self, Cycle, Cycled};

/// What the rate limit load asks.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) domain: String,
    /// The entry's key of every descriptor.
    pub(crate) key: String,
    /// Descriptors per call.
    pub(crate) descriptors: usize,
    /// Distinct values (`v0`, `v1`, ...), used in turn across descriptors
    /// and calls.
    pub(crate) values: usize,
    /// The request's hits_addend (0: unset).
    pub(crate) hits_addend: u32,
}

/// The ShouldRateLimit call, each distinct request sent in turn.
struct ShouldRateLimit;

impl Cycled for ShouldRateLimit {
    const PATH: &'static str = SHOULD_RATE_LIMIT_PATH;

    /// `RateLimitResponse.Code` by number.
    const OUTCOMES: &'static [&'static str] = &["UNKNOWN", "OK", "OVER_LIMIT", "unknown code"];

    fn outcome(message: &[u8]) -> anyhow::Result<usize> {
        let code = RateLimitResponse::decode(message)?.overall_code;
        Ok(usize::try_from(code).map_or(3, |c| c.min(3)))
    }
}

/// Every distinct request, gRPC-framed, in one buffer: `values` requests
/// (at least one), request `i`'s descriptor `j` with value
/// `v((i * descriptors + j) % values)`, so that consecutive requests use
/// every value in turn.
fn bodies(p: &Params) -> Cycle<ShouldRateLimit> {
    Cycle::new((0..p.values.max(1)).map(|i| {
        RateLimitRequest {
            domain: p.domain.clone(),
            descriptors: (0..p.descriptors)
                .map(|j| RateLimitDescriptor {
                    entries: vec![Entry {
                        key: p.key.clone(),
                        value: format!("v{}", (i * p.descriptors + j) % p.values),
                    }],
                    limit: None,
                    hits_addend: None,
                })
                .collect(),
            hits_addend: p.hits_addend,
        }
    }))
}

/// Runs the rate limit load as `wire` says.
pub(crate) fn run(p: Params, wire: &load_wire::Params) -> anyhow::Result<()> {
    anyhow::ensure!(p.descriptors >= 1, "--descriptors must be at least 1");
    anyhow::ensure!(p.values >= 1, "--values must be at least 1");
    eprintln!(
        "ShouldRateLimit load on domain {:?}: {} descriptor(s) of key {:?} per call over {} distinct values",
        p.domain, p.descriptors, p.key, p.values
    );
    let bodies = bodies(&p);
    load_wire::run(bodies, wire, "calls")
}
