//! An in-process Doorman lease server for the tests: on a listener at
//! 127.0.0.1:0, with the single-node election, so it is the master at once.
#![allow(dead_code)] // each test file uses a part

use tokio::net::TcpListener;
use tollgate_doorman::{Server, ServerConfig, SingleElection};

/// A listener on 127.0.0.1:0 and the address it is bound to.
pub(crate) async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// An address on 127.0.0.1 where nothing listens (a port bound for a
/// moment and let go).
pub(crate) async fn nowhere() -> String {
    listen().await.1
}

/// A lease server deciding by `yaml` on the system clock, the master at
/// `addr` (the single-node election); not serving yet.
pub(crate) fn master_at(yaml: &str, addr: &str) -> Server {
    let election = SingleElection::new(Some(addr.to_owned()));
    Server::builder(ServerConfig::from_yaml(yaml).unwrap())
        .election(&election)
        .build()
}

/// A lease server deciding by `yaml`, serving plain gRPC on 127.0.0.1:0 in
/// a task until the runtime ends: the server (to read its state) and its
/// address.
pub(crate) async fn serve(yaml: &str) -> (Server, String) {
    let (listener, addr) = listen().await;
    let server = master_at(yaml, &addr);
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    (server, addr)
}
