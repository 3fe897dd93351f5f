//! The quota admin API on a real listener, for the tests of its changes:
//! served on 127.0.0.1:0 and spoken to with the bare HTTP/1.1 client.

use std::sync::Arc;

use tollgate_quota::{admin_router, Admin};

#[path = "http1.rs"]
pub(crate) mod http1;

/// Serves `admin`'s routes on 127.0.0.1:0; returns the address.
pub(crate) async fn serve(admin: Arc<Admin>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, admin_router(admin)).await });
    addr
}

/// `method` with the JSON `body` on the route of `bucket` in `namespace`;
/// returns the status code and the body of the answer.
pub(crate) async fn on_bucket(
    addr: &str,
    method: &str,
    namespace: &str,
    bucket: &str,
    body: &str,
) -> (u16, String) {
    let path = format!("/api/admin/namespaces/{namespace}/buckets/{bucket}");
    http1::http(addr, method, &path, body).await
}
