//! An in-process Doorman lease server for this crate's tests: on a listener
//! at 127.0.0.1:0, with the single-node election, so it is the master at
//! once. (Other crates' tests take `tollgate_testkit::lease`; this crate's
//! cannot, as the kit's `lease` feature would turn on `server` in the
//! lease-client-alone build.)

use tollgate_doorman::{Server, ServerConfig, SingleElection};

/// A lease server deciding by `yaml`, serving plain gRPC on 127.0.0.1:0 in
/// a task until the runtime ends: the server (to read its state) and its
/// address.
pub(crate) async fn serve(yaml: &str) -> (Server, String) {
    let (listener, addr) = tollgate_testkit::net::listen().await;
    let election = SingleElection::new(Some(addr.clone()));
    let server = Server::builder(ServerConfig::from_yaml(yaml).unwrap())
        .election(&election)
        .build();
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    (server, addr)
}
