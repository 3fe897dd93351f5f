//! Helpers for the server's unit tests: a manual clock counted from `T`,
//! and a server client's request in one call.

use std::time::Duration;

use crate::pb;
use crate::Server;
use crate::WallClock as _;
use tollgate::ManualClock;

/// Unix time the tests count from.
pub(crate) const T: u64 = 1_700_000_000;

/// Moves `clock` to `T + s`.
pub(crate) fn at(clock: &ManualClock, s: u64) {
    clock.advance(Duration::from_secs(T + s) - clock.now());
}

/// Server `id` asks `server` for `wants` for one client, reporting `has`
/// as `(capacity, expiry in seconds after T)`; returns the grant.
pub(crate) fn ask(server: &Server, id: &str, wants: f64, has: Option<(f64, u64)>) -> f64 {
    let response = server
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: id.into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: "r".into(),
                has: has.map(|(capacity, expiry)| pb::Lease {
                    expiry_time: (T + expiry) as i64,
                    refresh_interval: 4,
                    capacity,
                }),
                wants: vec![pb::PriorityBandAggregate {
                    priority: 0,
                    num_clients: 1,
                    wants,
                }],
            }],
        })
        .unwrap();
    response.response[0].gets.capacity
}
