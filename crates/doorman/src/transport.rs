//! How a lease client and an intermediate server reach a Doorman server:
//! the four RPCs by address, over gRPC or (the simulator's, in
//! `simulate/in_process.rs`) in-process.
//!
//! # Implementation notes
//!
//! Callers keep the protocol logic (discovery, redirects, failover,
//! deadlines, backoff); a transport only carries one call to one address.
//! [`Grpc`] keeps one lazily connected tonic channel per address and puts
//! the deadline on every request; [`Transport::forget`] drops a channel
//! after a failure, since a failed connection may be half-open.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
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
        let bad = |e| Status::invalid_argument(format!("{address}: {e}"));
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

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(self.timeout);
        r
    }
}

impl Transport for Grpc {
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse> {
        let client = self.client(address);
        let request = self.request(pb::DiscoveryRequest {});
        Box::pin(async move {
            let r = client?.discovery(request).await?;
            Ok(r.into_inner())
        })
    }

    fn get_capacity(
        &self,
        address: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        let client = self.client(address);
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.get_capacity(request).await?;
            Ok(r.into_inner())
        })
    }

    fn get_server_capacity(
        &self,
        address: &str,
        request: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        let client = self.client(address);
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.get_server_capacity(request).await?;
            Ok(r.into_inner())
        })
    }

    fn release_capacity(
        &self,
        address: &str,
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        let client = self.client(address);
        let request = self.request(request);
        Box::pin(async move {
            let r = client?.release_capacity(request).await?;
            Ok(r.into_inner())
        })
    }

    fn forget(&self, address: &str) {
        self.channels.lock_unpoisoned().remove(address);
    }
}
