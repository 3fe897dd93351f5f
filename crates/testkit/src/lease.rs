//! An in-process Doorman lease server for the tests, on a listener at
//! 127.0.0.1:0 with the single-node election, so it is the master at once.

use tollgate_doorman::{Server, ServerConfig, SingleElection};

use crate::net::listen;

/// A lease server deciding by `yaml` on the system clock, the master at
/// `addr` (the single-node election); not serving yet.
///
/// # Panics
///
/// If `yaml` is not a lease server configuration.
fn master_at(yaml: &str, addr: &str) -> Server {
    let election = SingleElection::new(Some(addr.to_owned()));
    Server::builder(ServerConfig::from_yaml(yaml).unwrap())
        .election(&election)
        .build()
}

/// A lease server deciding by `yaml`, serving plain gRPC on 127.0.0.1:0 in
/// a task until the runtime ends: the server (to read its state) and its
/// address.
pub async fn serve(yaml: &str) -> (Server, String) {
    let (listener, addr) = listen().await;
    let server = master_at(yaml, &addr);
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    (server, addr)
}
