//! The simulator's transport: servers in this process, called directly.
//!
//! # Implementation notes
//!
//! [`InProcess`] calls the [`Server`]s registered under addresses through
//! the same wire-level entry points the gRPC service uses, so requests and
//! answers take the same checks and conversions, and a whole server tree
//! and its clients run on one (virtual) clock with nothing between them but
//! the messages.

use std::collections::HashMap;
use std::sync::RwLock;

use tonic::Status;

use crate::pb;
use crate::transport::{Call, Transport};
use crate::Server;
use tollgate_service::RwLockUnpoisoned;

/// Servers in this process, by address; an unknown address is
/// `unavailable`, as a dead server would be.
#[derive(Debug, Default)]
pub(crate) struct InProcess {
    servers: RwLock<HashMap<String, Server>>,
}

impl InProcess {
    /// Makes `server` reachable at `address`.
    pub(crate) fn add(&self, address: impl Into<String>, server: Server) {
        self.servers
            .write_unpoisoned()
            .insert(address.into(), server);
    }

    /// Makes every server unreachable (and breaks the reference cycle
    /// between the servers and a transport they use themselves).
    pub(crate) fn clear(&self) {
        self.servers.write_unpoisoned().clear();
    }

    fn call<T: Send + 'static>(
        &self,
        address: &str,
        f: impl FnOnce(&Server) -> Result<T, Status>,
    ) -> Call<T> {
        let result = match self.servers.read_unpoisoned().get(address) {
            Some(server) => f(server),
            None => Err(Status::unavailable(format!("no server at {address}"))),
        };
        Box::pin(std::future::ready(result))
    }
}

impl Transport for InProcess {
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse> {
        self.call(address, |s| Ok(s.discovery()))
    }

    fn get_capacity(
        &self,
        address: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        self.call(address, |s| s.get_capacity(request).map_err(Into::into))
    }

    fn get_server_capacity(
        &self,
        address: &str,
        request: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        self.call(address, |s| {
            s.get_server_capacity(request).map_err(Into::into)
        })
    }

    fn release_capacity(
        &self,
        address: &str,
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        self.call(address, |s| s.release_capacity(request).map_err(Into::into))
    }

    fn forget(&self, _address: &str) {}
}
