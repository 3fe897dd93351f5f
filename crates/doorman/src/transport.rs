//! How a lease client and an intermediate server reach a Doorman server:
//! the four RPCs by address, over gRPC or (the simulator's, in
//! `in_process.rs`) in-process.
//!
//! # Implementation notes
//!
//! Callers keep the protocol logic (discovery, redirects, failover,
//! deadlines, backoff); a transport only carries one call to one address.
//! [`Grpc`] keeps one lazily connected tonic channel per address and puts
//! the deadline on every request; [`Transport::forget`] drops a channel
//! after a failure, since a failed connection may be half-open.
//!
//! A server that refuses a client's certificate does so after the
//! client's side of a TLS 1.3 handshake has ended: the client only sees
//! the connection close before its call is answered (hyper drops the
//! alert's reason). Over TLS, such a failure carries a hint that points at
//! the certificate and at the server's log, which names the reason.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Status;

use super::pb;
use super::pb::capacity_client::CapacityClient;
use tollgate_service::LockUnpoisoned;

/// One RPC's answer, or its failure as a gRPC status.
pub(crate) type Call<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;

/// Carries the capacity RPCs to a server named by address.
pub(crate) trait Transport: Send + Sync + Debug {
    /// Discovery at `address`.
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse>;

    /// GetCapacity at `address`.
    fn get_capacity(
        &self,
        address: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse>;

    /// GetServerCapacity at `address`.
    // Only an intermediate server calls it.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    fn get_server_capacity(
        &self,
        address: &str,
        request: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse>;

    /// ReleaseCapacity at `address`.
    fn release_capacity(
        &self,
        address: &str,
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse>;

    /// Drops whatever is kept for `address` after a failed call.
    fn forget(&self, address: &str);
}

/// `address` as a URI (`http://` added when no scheme is given).
pub(crate) fn uri(address: &str) -> String {
    if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    }
}

/// The hint on a TLS connection closed before its call was answered.
const CLOSED_OVER_TLS: &str = "the server closed the TLS connection before answering: if it \
    requires client certificates it refused this one (its log says why; the certificate must \
    be X.509 v3 and signed by the server's client CA)";

/// The hint on a plaintext call answered with what HTTP/2 cannot read as
/// a frame: most often a TLS server's alert.
const PLAINTEXT_TO_TLS: &str = "the server may be serving TLS: dial it with the CA that signed \
    its certificate (--tls-ca)";

/// How a plaintext call to a TLS server shows on the client: HTTP/2 reads
/// the server's TLS alert as a frame, or, when the server has already
/// closed the connection, sees the close or the write that met it.
const PLAINTEXT_SYMPTOMS: &[&str] = &[
    "frame with invalid size",
    "connection closed",
    "broken pipe",
    "connection reset",
];

/// How a TLS connection the server closed mid-handshake shows on the
/// client: hyper sees the close itself, or the write that met it (which
/// one depends on who is first, so both are read as the same symptom).
const CLOSED: &[&str] = &["connection closed", "broken pipe", "connection reset"];

/// `status` with `text` added to its message when one of `symptoms` is in
/// its description or its causes'; the original status is its source.
fn hint(status: Status, symptoms: &[&str], text: &str) -> Status {
    let seen = std::iter::successors(Some(&status as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .any(|e| {
        let e = e.to_string().to_ascii_lowercase();
        symptoms.iter().any(|s| e.contains(s))
    });
    if !seen {
        return status;
    }
    let mut hinted = Status::new(status.code(), format!("{}: {text}", status.message()));
    hinted.set_source(Arc::new(status));
    hinted
}

/// gRPC over tonic, one channel per address, `timeout` on every call,
/// over TLS when `tls` is set.
#[derive(Debug)]
pub(crate) struct Grpc {
    timeout: Duration,
    tls: Option<ClientTlsConfig>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Grpc {
    /// Calls with a deadline of `timeout`; with `tls`, addresses without a
    /// scheme are dialled as `https://`.
    pub(crate) fn with_tls(timeout: Duration, tls: Option<ClientTlsConfig>) -> Grpc {
        Grpc {
            timeout,
            tls,
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, address: &str) -> Result<CapacityClient<Channel>, Status> {
        let mut channels = self.channels.lock_unpoisoned();
        if let Some(c) = channels.get(address) {
            return Ok(CapacityClient::new(c.clone()));
        }
        let bad = |e: tonic::transport::Error| {
            let mut status = Status::invalid_argument(format!("{address}: {e}"));
            status.set_source(Arc::new(e));
            status
        };
        let mut endpoint = match &self.tls {
            Some(_) if !address.contains("://") => {
                Endpoint::from_shared(format!("https://{address}")).map_err(bad)?
            }
            _ => Endpoint::from_shared(uri(address)).map_err(bad)?,
        };
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(bad)?;
        }
        let channel = endpoint
            .connect_timeout(self.timeout)
            .timeout(self.timeout)
            .connect_lazy();
        channels.insert(address.to_owned(), channel.clone());
        Ok(CapacityClient::new(channel))
    }

    /// What a failed call's status becomes: over TLS, a connection closed
    /// before the answer carries the hint that the server may have
    /// refused this client's certificate; in plaintext, HTTP/2 reading a
    /// TLS record as a frame, the hint that the server speaks TLS.
    fn explain(&self) -> fn(Status) -> Status {
        if self.tls.is_none() {
            |status| hint(status, PLAINTEXT_SYMPTOMS, PLAINTEXT_TO_TLS)
        } else {
            |status| hint(status, CLOSED, CLOSED_OVER_TLS)
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(self.timeout);
        r
    }
}

impl Transport for Grpc {
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse> {
        let (client, tls) = (self.client(address), self.explain());
        let request = self.request(pb::DiscoveryRequest {});
        Box::pin(async move {
            let r = client?.discovery(request).await.map_err(tls)?;
            Ok(r.into_inner())
        })
    }

    fn get_capacity(
        &self,
        address: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        let (client, tls) = (self.client(address), self.explain());
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.get_capacity(request).await.map_err(tls)?;
            Ok(r.into_inner())
        })
    }

    fn get_server_capacity(
        &self,
        address: &str,
        request: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        let (client, tls) = (self.client(address), self.explain());
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.get_server_capacity(request).await.map_err(tls)?;
            Ok(r.into_inner())
        })
    }

    fn release_capacity(
        &self,
        address: &str,
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        let (client, tls) = (self.client(address), self.explain());
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.release_capacity(request).await.map_err(tls)?;
            Ok(r.into_inner())
        })
    }

    fn forget(&self, address: &str) {
        self.channels.lock_unpoisoned().remove(address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symptom_in_the_status_or_its_causes_adds_the_hint() {
        let plain = Grpc::with_tls(Duration::from_secs(1), None).explain();
        let tls_alert = Status::internal(
            "h2 protocol error: http2 error: connection error detected: frame with invalid size",
        );
        let hinted = plain(tls_alert);
        assert!(hinted.message().ends_with(PLAINTEXT_TO_TLS), "{hinted:?}");
        assert!(std::error::Error::source(&hinted).is_some());
        let refused = Status::unavailable("tcp connect error");
        assert_eq!(plain(refused.clone()).message(), refused.message());
    }

    #[test]
    fn in_plaintext_a_close_or_a_write_that_met_it_carries_the_tls_hint() {
        let plain = Grpc::with_tls(Duration::from_secs(1), None).explain();
        for seen in [
            "transport error: connection closed",
            "transport error: stream closed because of a broken pipe",
            "transport error: Connection reset by peer (os error 104)",
        ] {
            let hinted = plain(Status::unknown(seen));
            assert!(hinted.message().ends_with(PLAINTEXT_TO_TLS), "{hinted:?}");
        }
    }

    #[test]
    fn over_tls_a_close_or_a_write_that_met_it_carries_the_certificate_hint() {
        let tls = Grpc::with_tls(Duration::from_secs(1), Some(ClientTlsConfig::new())).explain();
        for seen in [
            "transport error: connection closed",
            "transport error: stream closed because of a broken pipe",
            "transport error: Connection reset by peer (os error 104)",
        ] {
            let hinted = tls(Status::unknown(seen));
            assert!(hinted.message().ends_with(CLOSED_OVER_TLS), "{hinted:?}");
        }
        let late = Status::deadline_exceeded("Timeout expired");
        assert_eq!(tls(late.clone()).message(), late.message());
    }
}
