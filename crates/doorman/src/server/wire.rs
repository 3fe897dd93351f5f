//! The server's edge: wire requests become checked domain requests on the
//! way in, domain answers become wire responses on the way out. The
//! engine names no `pb` type; the RPC entry points on
//! [`Server`](super::Server), which the gRPC service and the simulator's
//! in-process transport both call, come through here.
//!
//! Go's server validated nothing; here a request with an empty or oversized
//! id, too many or duplicate resources, a negative, NaN or infinite amount,
//! a priority band with `num_clients < 1`, or a resource no template matches
//! is refused as a whole with a [`RequestError`], before anything changes.
//!
//! The intermediate server's poller speaks the same RPC as a client, so the
//! conversions of GetServerCapacity the other way round live here too.

use std::collections::HashSet;

use crate::algorithm::{AlgorithmConfig, Kind};
use crate::config::ServerConfig;
use crate::election::Mastership;
use crate::error::RequestError;
use crate::lease::{
    Answer, Band, CapacityRequest, Grant, Lease, ReleaseRequest, ResourceRequest,
    ServerCapacityRequest, ServerGrant, ServerResourceRequest,
};
use crate::pb::{self, from_wire_secs, to_wire_secs};

/// Limits on what one request may carry, set with
/// [`ServerBuilder::max_id_bytes`](super::ServerBuilder::max_id_bytes) and
/// [`ServerBuilder::max_resources_per_request`](super::ServerBuilder::max_resources_per_request).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestLimits {
    /// Longest client, server or resource id, in bytes.
    pub(crate) max_id_bytes: usize,
    /// Most resources in one request.
    pub(crate) max_resources_per_request: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_id_bytes: 1024,
            max_resources_per_request: 1000,
        }
    }
}

/// What a request is checked against: the server's limits and the
/// configuration in force.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules<'a> {
    pub(super) limits: &'a RequestLimits,
    pub(super) config: &'a ServerConfig,
}

/// Whether `x` is a finite number `>= 0`.
fn finite_non_negative(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn id(limits: &RequestLimits, field: &'static str, id: &str) -> Result<(), RequestError> {
    if id.is_empty() {
        return Err(if field == "resource_id" {
            RequestError::EmptyResourceId
        } else {
            RequestError::EmptyClientId
        });
    }
    if id.len() > limits.max_id_bytes {
        return Err(RequestError::IdTooLong {
            field,
            len: id.len(),
            max: limits.max_id_bytes,
        });
    }
    Ok(())
}

fn count(limits: &RequestLimits, count: usize) -> Result<(), RequestError> {
    let max = limits.max_resources_per_request;
    if count > max {
        return Err(RequestError::TooManyResources { count, max });
    }
    Ok(())
}

/// Checks the resource ids of a request: well formed, distinct, and each
/// matched by a template of the configuration.
fn resources<'a>(
    rules: &Rules<'_>,
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), RequestError> {
    count(rules.limits, ids.len())?;
    // Most requests name one resource: no set is needed to find a repeat.
    let mut seen = (ids.len() > 1).then(|| HashSet::with_capacity(ids.len()));
    for rid in ids {
        id(rules.limits, "resource_id", rid)?;
        if seen.as_mut().is_some_and(|seen| !seen.insert(rid)) {
            return Err(RequestError::DuplicateResource(rid.to_owned()));
        }
        if rules.config.find(rid).is_none() {
            return Err(RequestError::UnknownResource(rid.to_owned()));
        }
    }
    Ok(())
}

/// A request's `has`, its capacity checked.
fn has(resource: &str, lease: Option<pb::Lease>) -> Result<Option<Lease>, RequestError> {
    match lease {
        Some(l) if !finite_non_negative(l.capacity) => Err(RequestError::InvalidHas {
            resource: resource.to_owned(),
            has: l.capacity,
        }),
        l => Ok(l.map(Lease::from)),
    }
}

fn wants(resource: &str, wants: f64) -> Result<(), RequestError> {
    if finite_non_negative(wants) {
        Ok(())
    } else {
        Err(RequestError::InvalidWants {
            resource: resource.to_owned(),
            wants,
        })
    }
}

/// A GetCapacity request, checked.
pub(super) fn capacity_request(
    rules: &Rules<'_>,
    req: pb::GetCapacityRequest,
) -> Result<CapacityRequest, RequestError> {
    id(rules.limits, "client_id", &req.client_id)?;
    resources(rules, req.resource.iter().map(|r| r.resource_id.as_str()))?;
    let mut out = Vec::with_capacity(req.resource.len());
    for r in req.resource {
        wants(&r.resource_id, r.wants)?;
        let has = has(&r.resource_id, r.has)?;
        out.push(ResourceRequest {
            resource_id: r.resource_id,
            priority: r.priority,
            has,
            wants: r.wants,
        });
    }
    Ok(CapacityRequest {
        client_id: req.client_id,
        resources: out,
    })
}

/// A GetServerCapacity request, checked.
pub(super) fn server_capacity_request(
    rules: &Rules<'_>,
    req: pb::GetServerCapacityRequest,
) -> Result<ServerCapacityRequest, RequestError> {
    id(rules.limits, "server_id", &req.server_id)?;
    resources(rules, req.resource.iter().map(|r| r.resource_id.as_str()))?;
    let mut out = Vec::with_capacity(req.resource.len());
    for r in req.resource {
        let mut bands = Vec::with_capacity(r.wants.len());
        for band in &r.wants {
            let num_clients = u64::try_from(band.num_clients)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| RequestError::InvalidNumClients {
                    resource: r.resource_id.clone(),
                    num_clients: band.num_clients,
                })?;
            wants(&r.resource_id, band.wants)?;
            bands.push(Band {
                priority: band.priority,
                num_clients,
                wants: band.wants,
            });
        }
        let sum = bands.iter().fold(0.0, |sum, b| sum + b.wants);
        wants(&r.resource_id, sum)?; // finite bands can still overflow
        out.push(ServerResourceRequest {
            has: has(&r.resource_id, r.has)?,
            resource_id: r.resource_id,
            bands,
        });
    }
    Ok(ServerCapacityRequest {
        server_id: req.server_id,
        resources: out,
    })
}

/// A ReleaseCapacity request, checked: only its client id and its size.
/// Resource ids are not checked: an empty, oversized or unknown id names
/// no lease, and releasing it does nothing. (Go's client library sends
/// empty ids before the real ones on `Close()` and retries forever on an
/// error; Go's server ignores them.)
pub(super) fn release_request(
    limits: &RequestLimits,
    req: pb::ReleaseCapacityRequest,
) -> Result<ReleaseRequest, RequestError> {
    id(limits, "client_id", &req.client_id)?;
    count(limits, req.resource_id.len())?;
    Ok(ReleaseRequest {
        client_id: req.client_id,
        resource_ids: req.resource_id,
    })
}

/// A GetCapacity response.
pub(super) fn capacity_response(answer: Answer<Vec<Grant>>) -> pb::GetCapacityResponse {
    match answer {
        Answer::Done(grants) => pb::GetCapacityResponse {
            response: grants
                .into_iter()
                .map(|g| pb::ResourceResponse {
                    resource_id: g.resource_id,
                    gets: g.lease.into(),
                    safe_capacity: g.safe_capacity,
                })
                .collect(),
            mastership: None,
        },
        Answer::NotMaster(m) => pb::GetCapacityResponse {
            response: Vec::new(),
            mastership: Some((&m).into()),
        },
    }
}

/// A GetServerCapacity response.
pub(super) fn server_capacity_response(
    answer: Answer<Vec<ServerGrant>>,
) -> pb::GetServerCapacityResponse {
    match answer {
        Answer::Done(grants) => pb::GetServerCapacityResponse {
            response: grants
                .into_iter()
                .map(|g| pb::ServerCapacityResourceResponse {
                    resource_id: g.grant.resource_id,
                    gets: g.grant.lease.into(),
                    algorithm: g.algorithm.as_ref().map(pb::Algorithm::from),
                    safe_capacity: g.grant.safe_capacity,
                })
                .collect(),
            mastership: None,
        },
        Answer::NotMaster(m) => pb::GetServerCapacityResponse {
            response: Vec::new(),
            mastership: Some((&m).into()),
        },
    }
}

/// A ReleaseCapacity response.
pub(super) fn release_response(answer: Answer<()>) -> pb::ReleaseCapacityResponse {
    match answer {
        Answer::Done(()) => pb::ReleaseCapacityResponse { mastership: None },
        Answer::NotMaster(m) => pb::ReleaseCapacityResponse {
            mastership: Some((&m).into()),
        },
    }
}

/// A Discovery response.
pub(super) fn discovery_response(m: &Mastership) -> pb::DiscoveryResponse {
    pb::DiscoveryResponse {
        mastership: m.into(),
        is_master: m.is_master,
    }
}

/// An intermediate server's resource requests, as sent to its parent.
pub(super) fn to_server_resources(
    resources: Vec<ServerResourceRequest>,
) -> Vec<pb::ServerCapacityResourceRequest> {
    resources
        .into_iter()
        .map(|r| pb::ServerCapacityResourceRequest {
            resource_id: r.resource_id,
            has: r.has.map(pb::Lease::from),
            wants: r
                .bands
                .into_iter()
                .map(|b| pb::PriorityBandAggregate {
                    priority: b.priority,
                    num_clients: i64::try_from(b.num_clients).unwrap_or(i64::MAX),
                    wants: b.wants,
                })
                .collect(),
        })
        .collect()
}

/// The grants of a parent's GetServerCapacity response (its mastership is
/// the caller's business).
pub(super) fn from_server_response(response: pb::GetServerCapacityResponse) -> Vec<ServerGrant> {
    response
        .response
        .into_iter()
        .map(|r| ServerGrant {
            algorithm: r.algorithm.as_ref().and_then(algorithm),
            grant: Grant {
                resource_id: r.resource_id,
                lease: r.gets.into(),
                safe_capacity: r.safe_capacity,
            },
        })
        .collect()
}

/// A parent's algorithm as a local one; `None` for an unknown kind.
/// Lease length and refresh interval are at least one second.
fn algorithm(a: &pb::Algorithm) -> Option<AlgorithmConfig> {
    let kind: Kind = pb::algorithm::Kind::try_from(a.kind).ok()?.into();
    let second = std::time::Duration::from_secs(1);
    Some(AlgorithmConfig::new(
        kind,
        from_wire_secs(a.lease_length).max(second),
        from_wire_secs(a.refresh_interval).max(second),
    ))
}

impl From<Kind> for pb::algorithm::Kind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::NoAlgorithm => pb::algorithm::Kind::NoAlgorithm,
            Kind::Static => pb::algorithm::Kind::Static,
            Kind::ProportionalShare => pb::algorithm::Kind::ProportionalShare,
            Kind::FairShare => pb::algorithm::Kind::FairShare,
        }
    }
}

impl From<pb::algorithm::Kind> for Kind {
    fn from(kind: pb::algorithm::Kind) -> Self {
        match kind {
            pb::algorithm::Kind::NoAlgorithm => Kind::NoAlgorithm,
            pb::algorithm::Kind::Static => Kind::Static,
            pb::algorithm::Kind::ProportionalShare => Kind::ProportionalShare,
            pb::algorithm::Kind::FairShare => Kind::FairShare,
        }
    }
}

impl From<&AlgorithmConfig> for pb::Algorithm {
    fn from(algo: &AlgorithmConfig) -> Self {
        pb::Algorithm {
            kind: pb::algorithm::Kind::from(algo.kind) as i32,
            lease_length: to_wire_secs(algo.lease_length),
            refresh_interval: to_wire_secs(algo.refresh_interval),
            parameters: algo
                .parameters
                .iter()
                .map(|(name, value)| pb::NamedParameter {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            learning_mode_duration: algo.learning_mode_duration.map(to_wire_secs),
        }
    }
}

impl From<Lease> for pb::Lease {
    /// Expiry in Unix seconds (the server's timestamps are Unix time),
    /// refresh interval in seconds.
    fn from(lease: Lease) -> Self {
        pb::Lease {
            expiry_time: to_wire_secs(lease.expiry),
            refresh_interval: to_wire_secs(lease.refresh_interval),
            capacity: lease.capacity,
        }
    }
}

impl From<pb::Lease> for Lease {
    /// A negative expiry or refresh interval reads as 0.
    fn from(lease: pb::Lease) -> Self {
        Lease {
            capacity: lease.capacity,
            expiry: from_wire_secs(lease.expiry_time),
            refresh_interval: from_wire_secs(lease.refresh_interval),
        }
    }
}

impl From<&Mastership> for pb::Mastership {
    fn from(m: &Mastership) -> Self {
        pb::Mastership {
            master_address: m.master_address.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(num_clients: i64, wants: f64) -> pb::PriorityBandAggregate {
        pb::PriorityBandAggregate {
            priority: 0,
            num_clients,
            wants,
        }
    }

    fn server_req(bands: Vec<pb::PriorityBandAggregate>) -> pb::GetServerCapacityRequest {
        pb::GetServerCapacityRequest {
            server_id: "s".into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: "r".into(),
                has: None,
                wants: bands,
            }],
        }
    }

    /// Per resource, the total wants and subclients of its bands.
    fn totals(
        rules: &Rules<'_>,
        req: pb::GetServerCapacityRequest,
    ) -> Result<Vec<(f64, u64)>, RequestError> {
        let req = server_capacity_request(rules, req)?;
        Ok(req
            .resources
            .iter()
            .map(|r| (r.wants(), r.subclients()))
            .collect())
    }

    #[test]
    fn bands_are_summed() {
        let c = ServerConfig::builtin();
        let l = RequestLimits::default();
        let rules = Rules {
            limits: &l,
            config: &c,
        };
        let t = totals(&rules, server_req(vec![band(3, 1.5), band(2, 2.5)]));
        assert_eq!(t.unwrap(), [(4.0, 5)]);
        assert_eq!(totals(&rules, server_req(vec![])).unwrap(), [(0.0, 1)]);
    }

    #[test]
    fn bad_bands_are_refused() {
        let c = ServerConfig::builtin();
        let l = RequestLimits::default();
        let rules = Rules {
            limits: &l,
            config: &c,
        };
        for bad in [
            vec![band(0, 1.0)],
            vec![band(-5, 1.0)],
            vec![band(1, -1.0)],
            vec![band(1, f64::NAN)],
            vec![band(1, f64::MAX), band(1, f64::MAX)],
        ] {
            assert!(totals(&rules, server_req(bad)).is_err());
        }
    }

    #[test]
    fn limits_are_configurable() {
        let c = ServerConfig::builtin();
        let l = RequestLimits {
            max_id_bytes: 3,
            max_resources_per_request: 1,
        };
        let rules = Rules {
            limits: &l,
            config: &c,
        };
        let req = |client: &str, ids: &[&str]| pb::GetCapacityRequest {
            client_id: client.into(),
            resource: ids
                .iter()
                .map(|id| pb::ResourceRequest {
                    resource_id: (*id).into(),
                    priority: 0,
                    has: None,
                    wants: 1.0,
                })
                .collect(),
        };
        assert!(capacity_request(&rules, req("abc", &["xyz"])).is_ok());
        assert!(matches!(
            capacity_request(&rules, req("abcd", &["x"])),
            Err(RequestError::IdTooLong {
                field: "client_id",
                len: 4,
                max: 3
            })
        ));
        assert!(matches!(
            capacity_request(&rules, req("a", &["x", "y"])),
            Err(RequestError::TooManyResources { count: 2, max: 1 })
        ));
    }

    #[test]
    fn a_resource_named_twice_is_refused_and_one_named_once_is_not() {
        let c = ServerConfig::builtin();
        let limits = RequestLimits::default();
        let rules = Rules {
            limits: &limits,
            config: &c,
        };
        let ask = |ids: &[&str]| resources(&rules, ids.iter().copied());
        assert_eq!(ask(&["a"]), Ok(()));
        assert_eq!(ask(&["a", "b", "c"]), Ok(()));
        assert_eq!(
            ask(&["a", "b", "a"]),
            Err(RequestError::DuplicateResource("a".into()))
        );
    }
}
