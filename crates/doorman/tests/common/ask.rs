//! The GetCapacity request the tests send: one client asking for one
//! resource.

use tollgate_doorman::pb;

/// `client` asking for `wants` of `resource` at `priority`, reporting that
/// it holds `has` (with no expiry or refresh interval) when given.
pub(crate) fn get_capacity(
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
