//! The rules a request must pass before the server changes anything.
//!
//! Go's server validated nothing; here a request with an empty or oversized
//! id, too many or duplicate resources, a negative, NaN or infinite amount,
//! a priority band with `num_clients < 1`, or a resource no template matches
//! is refused as a whole with a [`RequestError`].

use std::collections::HashSet;

use super::super::config::Config;
use super::super::error::RequestError;
use super::super::pb;

/// Limits on what one request may carry.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest client, server or resource id, in bytes.
    pub max_id_bytes: usize,
    /// Most resources in one request.
    pub max_resources_per_request: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_id_bytes: 1024,
            max_resources_per_request: 1000,
        }
    }
}

/// Whether `x` is a finite number `>= 0`.
fn finite_non_negative(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn id(limits: &Limits, field: &'static str, id: &str) -> Result<(), RequestError> {
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

fn count(limits: &Limits, count: usize) -> Result<(), RequestError> {
    let max = limits.max_resources_per_request;
    if count > max {
        return Err(RequestError::TooManyResources { count, max });
    }
    Ok(())
}

/// Checks the resource ids of a request: well formed, distinct, and each
/// matched by a template of `config`.
fn resources<'a>(
    limits: &Limits,
    config: &Config,
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), RequestError> {
    count(limits, ids.len())?;
    let mut seen = HashSet::with_capacity(ids.len());
    for rid in ids {
        id(limits, "resource_id", rid)?;
        if !seen.insert(rid) {
            return Err(RequestError::DuplicateResource(rid.to_owned()));
        }
        if config.find(rid).is_none() {
            return Err(RequestError::UnknownResource(rid.to_owned()));
        }
    }
    Ok(())
}

fn has(resource: &str, lease: Option<&pb::Lease>) -> Result<(), RequestError> {
    match lease {
        Some(l) if !finite_non_negative(l.capacity) => Err(RequestError::InvalidHas {
            resource: resource.to_owned(),
            has: l.capacity,
        }),
        _ => Ok(()),
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

/// Checks a GetCapacity request.
pub(super) fn get_capacity(
    limits: &Limits,
    config: &Config,
    req: &pb::GetCapacityRequest,
) -> Result<(), RequestError> {
    id(limits, "client_id", &req.client_id)?;
    resources(
        limits,
        config,
        req.resource.iter().map(|r| r.resource_id.as_str()),
    )?;
    for r in &req.resource {
        wants(&r.resource_id, r.wants)?;
        has(&r.resource_id, r.has.as_ref())?;
    }
    Ok(())
}

/// Checks a GetServerCapacity request; returns, per resource, the total
/// wants and subclients of its priority bands (at least one subclient: a
/// server with no bands still stands for itself).
pub(super) fn get_server_capacity(
    limits: &Limits,
    config: &Config,
    req: &pb::GetServerCapacityRequest,
) -> Result<Vec<(f64, u64)>, RequestError> {
    id(limits, "server_id", &req.server_id)?;
    resources(
        limits,
        config,
        req.resource.iter().map(|r| r.resource_id.as_str()),
    )?;
    let mut totals = Vec::with_capacity(req.resource.len());
    for r in &req.resource {
        let mut sum = 0.0;
        let mut subclients: u64 = 0;
        for band in &r.wants {
            if band.num_clients < 1 {
                return Err(RequestError::InvalidNumClients {
                    resource: r.resource_id.clone(),
                    num_clients: band.num_clients,
                });
            }
            wants(&r.resource_id, band.wants)?;
            sum += band.wants;
            subclients = subclients.saturating_add(band.num_clients.unsigned_abs());
        }
        wants(&r.resource_id, sum)?; // finite bands can still overflow
        has(&r.resource_id, r.has.as_ref())?;
        totals.push((sum, subclients.max(1)));
    }
    Ok(totals)
}

/// Checks a ReleaseCapacity request: only its client id and its size.
/// Resource ids are not checked: an empty, oversized or unknown id names
/// no lease, and releasing it does nothing. (Go's client library sends
/// empty ids before the real ones on `Close()` and retries forever on an
/// error; Go's server ignores them.)
pub(super) fn release_capacity(
    limits: &Limits,
    req: &pb::ReleaseCapacityRequest,
) -> Result<(), RequestError> {
    id(limits, "client_id", &req.client_id)?;
    count(limits, req.resource_id.len())?;
    Ok(())
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

    #[test]
    fn bands_are_summed() {
        let c = Config::builtin();
        let l = Limits::default();
        let t = get_server_capacity(&l, &c, &server_req(vec![band(3, 1.5), band(2, 2.5)]));
        assert_eq!(t.unwrap(), [(4.0, 5)]);
        assert_eq!(
            get_server_capacity(&l, &c, &server_req(vec![])).unwrap(),
            [(0.0, 1)]
        );
    }

    #[test]
    fn bad_bands_are_refused() {
        let c = Config::builtin();
        let l = Limits::default();
        for bad in [
            vec![band(0, 1.0)],
            vec![band(-5, 1.0)],
            vec![band(1, -1.0)],
            vec![band(1, f64::NAN)],
            vec![band(1, f64::MAX), band(1, f64::MAX)],
        ] {
            assert!(get_server_capacity(&l, &c, &server_req(bad)).is_err());
        }
    }

    #[test]
    fn limits_are_configurable() {
        let c = Config::builtin();
        let l = Limits {
            max_id_bytes: 3,
            max_resources_per_request: 1,
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
        assert!(get_capacity(&l, &c, &req("abc", &["xyz"])).is_ok());
        assert!(matches!(
            get_capacity(&l, &c, &req("abcd", &["x"])),
            Err(RequestError::IdTooLong {
                field: "client_id",
                len: 4,
                max: 3
            })
        ));
        assert!(matches!(
            get_capacity(&l, &c, &req("a", &["x", "y"])),
            Err(RequestError::TooManyResources { count: 2, max: 1 })
        ));
    }
}
