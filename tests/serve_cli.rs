//! `tollgate serve` starts with one command (no config) and answers gRPC.

#[path = "common/ask.rs"]
mod ask;
#[path = "common/cli.rs"]
mod cli;

use tollgate::doorman::pb;
use tollgate::doorman::pb::capacity_client::CapacityClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_config_grants_capacity() {
    let mut server = cli::start(&mut cli::on_free_ports("serve"));
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening"));

    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let d = client
        .discovery(pb::DiscoveryRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(d.is_master);
    assert_eq!(d.mastership.master_address.as_deref(), Some(addr.as_str()));
    let r = client
        .get_capacity(ask::get_capacity("c", "anything", 0, 10.0, None))
        .await
        .unwrap()
        .into_inner();
    assert!(r.mastership.is_none());
    let g = &r.response[0];
    // The built-in template: FAIR_SHARE, 60 s leases refreshed every 15 s.
    // Learning mode (one lease length) grants what the client holds: nothing.
    assert_eq!(g.gets.refresh_interval, 15);
    assert_eq!(g.gets.capacity, 0.0);
}
