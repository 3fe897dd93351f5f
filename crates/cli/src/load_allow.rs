//! `tollgate load --mode allow`: many concurrent Allow calls against a quota
//! server, on one bucket or spread over many bucket names (asked round
//! robin across callers), reporting Allow/s, statuses, latency percentiles
//! and CPU time per call. Every request body is encoded once before the
//! run; the calls go through `load_wire.rs`.

use prost::Message as _;
use tollgate_quota::pb::{AllowRequest, AllowResponse};
use tollgate_quota::ALLOW_PATH;

use crate::load_wire::{self, Cycle, Cycled};

/// What the Allow load asks.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) namespace: String,
    /// The bucket names asked, round robin.
    pub(crate) bucket_names: Vec<String>,
    pub(crate) tokens: i64,
}

/// The Allow call, each bucket name's request sent in turn.
struct Allow;

impl Cycled for Allow {
    const PATH: &'static str = ALLOW_PATH;

    /// `AllowResponse.Status` by number.
    const OUTCOMES: &'static [&'static str] = &[
        "OK",
        "REJECTED_TIMEOUT",
        "REJECTED_NO_BUCKET",
        "REJECTED_TOO_MANY_BUCKETS",
        "REJECTED_TOO_MANY_TOKENS_REQUESTED",
        "REJECTED_INVALID_REQUEST",
        "REJECTED_SERVER_ERROR",
        "unknown status",
    ];

    fn outcome(message: &[u8]) -> anyhow::Result<usize> {
        let status = AllowResponse::decode(message)?.status;
        Ok(usize::try_from(status).map_or(7, |s| s.min(7)))
    }
}

/// Every bucket name's request, gRPC-framed, in one buffer.
fn bodies(namespace: &str, names: &[String], tokens: i64) -> Cycle<Allow> {
    Cycle::new(names.iter().map(|name| AllowRequest {
        namespace: namespace.to_owned(),
        bucket_name: name.clone(),
        tokens_requested: tokens,
        max_wait_millis_override: 0,
        max_wait_time_override: false,
    }))
}

/// Runs the Allow load as `wire` says.
pub(crate) fn run(p: Params, wire: &load_wire::Params) -> anyhow::Result<()> {
    anyhow::ensure!(!p.bucket_names.is_empty(), "--buckets must be at least 1");
    let names = match p.bucket_names.as_slice() {
        [one] => format!("bucket {one:?}"),
        many => format!("{} bucket names", many.len()),
    };
    eprintln!("Allow load on {names} in namespace {:?}", p.namespace);
    let bodies = bodies(&p.namespace, &p.bucket_names, p.tokens);
    load_wire::run(bodies, wire, "allows")
}
