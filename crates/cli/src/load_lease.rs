//! `tollgate load` in lease mode: many simulated clients refreshing their
//! leases on one resource of a Doorman server, as GetCapacity calls through
//! `load_wire.rs`. Each caller owns a share of the client ids and asks for
//! each in turn, sending the lease it was last granted as `has`; every
//! client asks once before the timed run, so the server knows all of them.

use prost::Message as _;
use tollgate_doorman::pb;
use tonic::codegen::Bytes;

use crate::load_wire::{self, Workload};

/// The GetCapacity path.
const PATH: &str = "/doorman.Capacity/GetCapacity";

/// What the lease load asks.
#[derive(Debug)]
pub(crate) struct Leases {
    /// Simulated clients (distinct client ids).
    pub(crate) clients: usize,
    /// The resource every client asks for.
    pub(crate) resource: String,
}

/// One simulated client.
#[derive(Debug)]
struct Client {
    id: String,
    wants: f64,
    /// The capacity last granted.
    has: Option<f64>,
}

/// One caller's clients, asked in turn.
#[derive(Debug)]
pub(crate) struct Caller {
    clients: Vec<Client>,
    /// The client asked last.
    last: usize,
}

/// Client `i`'s wants: spread over 1..=100 so the resource is contended.
fn wants(i: usize) -> f64 {
    (i % 100 + 1) as f64
}

impl Workload for Leases {
    type Caller = Caller;

    const PATH: &'static str = PATH;

    const OUTCOMES: &'static [&'static str] = &["granted", "redirects"];

    fn caller(&self, k: usize, n: usize) -> Caller {
        let clients = (k..self.clients)
            .step_by(n.max(1))
            .map(|i| Client {
                id: format!("load-{i}"),
                wants: wants(i),
                has: None,
            })
            .collect();
        Caller {
            clients,
            last: usize::MAX,
        }
    }

    fn warm_up(&self, caller: &Caller) -> usize {
        caller.clients.len()
    }

    fn request(&self, caller: &mut Caller) -> Bytes {
        caller.last = caller.last.wrapping_add(1) % caller.clients.len().max(1);
        let Some(client) = caller.clients.get(caller.last) else {
            return Bytes::new();
        };
        crate::grpc_client::grpc_frame(&pb::GetCapacityRequest {
            client_id: client.id.clone(),
            resource: vec![pb::ResourceRequest {
                resource_id: self.resource.clone(),
                priority: 0,
                has: client.has.map(|capacity| pb::Lease {
                    expiry_time: 0,
                    refresh_interval: 0,
                    capacity,
                }),
                wants: client.wants,
            }],
        })
    }

    fn response(&self, caller: &mut Caller, message: &[u8]) -> anyhow::Result<usize> {
        let r = pb::GetCapacityResponse::decode(message)?;
        if r.mastership.is_some() {
            return Ok(1);
        }
        if let Some(client) = caller.clients.get_mut(caller.last) {
            client.has = r.response.first().map(|r| r.gets.capacity);
        }
        Ok(0)
    }
}

/// Runs the lease load as `wire` says (with no more callers than clients).
pub(crate) fn run(leases: Leases, wire: &load_wire::Params) -> anyhow::Result<()> {
    eprintln!(
        "lease load: {} clients asking for {:?}",
        leases.clients, leases.resource
    );
    load_wire::run(leases, wire, "rpcs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_share_the_clients_and_send_what_they_were_granted() {
        let leases = Leases {
            clients: 5,
            resource: "r".into(),
        };
        let mut c = leases.caller(1, 2);
        assert_eq!(leases.warm_up(&c), 2);
        let ask = |body: Bytes| pb::GetCapacityRequest::decode(&body[5..]).unwrap();
        let first = ask(leases.request(&mut c));
        assert_eq!(first.client_id, "load-1");
        assert_eq!(first.resource[0].wants, 2.0);
        assert_eq!(first.resource[0].has, None);
        let granted = pb::GetCapacityResponse {
            response: vec![pb::ResourceResponse {
                resource_id: "r".into(),
                gets: pb::Lease {
                    expiry_time: 1,
                    refresh_interval: 1,
                    capacity: 1.5,
                },
                safe_capacity: None,
            }],
            mastership: None,
        };
        assert_eq!(
            leases.response(&mut c, &granted.encode_to_vec()).unwrap(),
            0
        );
        assert_eq!(ask(leases.request(&mut c)).client_id, "load-3");
        let again = ask(leases.request(&mut c));
        assert_eq!(again.client_id, "load-1");
        assert_eq!(again.resource[0].has.map(|l| l.capacity), Some(1.5));
        let redirect = pb::GetCapacityResponse {
            response: vec![],
            mastership: Some(pb::Mastership {
                master_address: Some("elsewhere:1".into()),
            }),
        };
        assert_eq!(
            leases.response(&mut c, &redirect.encode_to_vec()).unwrap(),
            1
        );
    }
}
