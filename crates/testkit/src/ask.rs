//! The Doorman requests the tests send: a GetCapacity for one resource and
//! a Discovery.

use tollgate_doorman::pb;

/// `client` asking for `wants` of `resource` at `priority`, reporting that
/// it holds `has` (with no expiry or refresh interval) when given.
pub fn get_capacity(
    client: &str,
    resource: &str,
    priority: i64,
    wants: f64,
    has: Option<f64>,
) -> pb::GetCapacityRequest {
    pb::GetCapacityRequest {
        client_id: client.into(),
        resource: vec![pb::ResourceRequest {
            resource_id: resource.into(),
            priority,
            has: has.map(|capacity| pb::Lease {
                expiry_time: 0,
                refresh_interval: 0,
                capacity,
            }),
            wants,
        }],
    }
}

/// Whether the Doorman server at `addr` says it is the master (`false`
/// when it does not answer).
pub async fn is_master(addr: &str) -> bool {
    use pb::capacity_client::CapacityClient;
    let Ok(mut c) = CapacityClient::connect(format!("http://{addr}")).await else {
        return false;
    };
    c.discovery(pb::DiscoveryRequest {})
        .await
        .is_ok_and(|r| r.into_inner().is_master)
}
