//! Listeners and dead addresses on loopback, for servers started in a
//! test.

use tokio::net::TcpListener;

/// A listener on 127.0.0.1:0 and the address it is bound to.
pub async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// An address on 127.0.0.1 where nothing listens (a port bound for a
/// moment and let go).
pub async fn nowhere() -> String {
    listen().await.1
}

/// A port on 127.0.0.1 free a moment ago (bound and let go), for a
/// process that binds it itself.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
