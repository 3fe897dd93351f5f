//! Reading a unary gRPC answer spoken with raw HTTP/2 (the `h2` crate).

/// The HTTP status, the `grpc-status` (from the trailers or a
/// trailers-only response; empty if none) and the body of the response to
/// one call.
pub(crate) async fn read_answer(
    response: h2::client::ResponseFuture,
) -> Result<(u16, String, Vec<u8>), h2::Error> {
    let (head, mut body) = response.await?.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        data.extend_from_slice(&chunk?);
    }
    let trailers = body.trailers().await?;
    let status = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.headers.get("grpc-status"))
        .map(|s| s.to_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    Ok((head.status.as_u16(), status, data))
}
