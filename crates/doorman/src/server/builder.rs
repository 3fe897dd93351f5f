//! [`ServerBuilder`]: the one way to make a [`Server`], from its
//! configuration and whatever the defaults do not fit.

use std::sync::Arc;

use tonic::transport::ClientTlsConfig;

use super::mastership::View;
use super::parent::{self, Parent, ParentLink};
use super::wire::RequestLimits;
use super::{Server, Serving};
use crate::clock::{SystemWallClock, WallClock};
use crate::config::ServerConfig;
use crate::election::single::SingleElection;
use crate::election::Election;
use crate::engine::Engine;
use crate::transport::{Grpc, Transport};
use tollgate_service::{rustls, ClientTls, ServerLimits, ServerTls, TlsError};

/// Options for a [`Server`]; start with [`Server::builder`].
///
/// Every option has a default: a single-node master, the system's
/// real-time clock, the default request limits and [`ServerLimits`], no
/// parent (a root server) and no TLS.
///
/// # Examples
///
/// An intermediate server, one of several elected on etcd in production,
/// here the only one:
///
/// ```
/// use tollgate_doorman::{Parent, Server, ServerConfig, ServerLimits, SingleElection};
///
/// let config = ServerConfig::from_yaml(
///     r#"
/// resources:
///   - identifier_glob: "*"
///     capacity: 0 # what the parent grants
///     algorithm:
///       kind: FAIR_SHARE
///       lease_length: 60
///       refresh_interval: 5
/// "#,
/// )?;
/// let election = SingleElection::new(Some("10.0.0.7:15000".into()));
/// let server = Server::builder(config)
///     .election(&election)
///     .limits(ServerLimits { max_connections: 1000, ..ServerLimits::default() })
///     .parent(Parent {
///         address: "root.example:15000".into(),
///         server_id: "10.0.0.7:15000".into(),
///         decay_factor: 0.5,
///     })
///     .build();
/// assert!(server.current_mastership().is_master);
/// # Ok::<(), tollgate_doorman::ServerConfigError>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ServerBuilder<'a> {
    config: ServerConfig,
    election: Option<&'a dyn Election>,
    clock: Option<Arc<dyn WallClock>>,
    request_limits: RequestLimits,
    limits: ServerLimits,
    parent: Option<Parent>,
    parent_tls: Option<ClientTlsConfig>,
    transport: Option<Arc<dyn Transport>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    threads: Option<usize>,
}

impl<'a> ServerBuilder<'a> {
    /// A builder for a server with `config` ([`Server::builder`]).
    pub(super) fn new(config: ServerConfig) -> ServerBuilder<'a> {
        ServerBuilder {
            config,
            election: None,
            clock: None,
            request_limits: RequestLimits::default(),
            limits: ServerLimits::default(),
            parent: None,
            parent_tls: None,
            transport: None,
            tls: None,
            threads: None,
        }
    }

    /// Follows `election` for mastership (default: a single-node master
    /// that names no address in its Discovery answers).
    pub fn election(mut self, election: &'a dyn Election) -> ServerBuilder<'a> {
        self.election = Some(election);
        self
    }

    /// Reads time from `clock` (default: the system's real-time clock).
    pub fn clock(mut self, clock: Arc<dyn WallClock>) -> ServerBuilder<'a> {
        self.clock = Some(clock);
        self
    }

    /// Refuses requests naming a client, server or resource id longer than
    /// `bytes` (default 1024) with `INVALID_ARGUMENT`.
    pub fn max_id_bytes(mut self, bytes: usize) -> ServerBuilder<'a> {
        self.request_limits.max_id_bytes = bytes;
        self
    }

    /// Refuses requests carrying more than `count` resources (default
    /// 1000) with `INVALID_ARGUMENT`.
    pub fn max_resources_per_request(mut self, count: usize) -> ServerBuilder<'a> {
        self.request_limits.max_resources_per_request = count;
        self
    }

    /// Serves under the transport limits `limits` (default
    /// [`ServerLimits::default`]).
    pub fn limits(mut self, limits: ServerLimits) -> ServerBuilder<'a> {
        self.limits = limits;
        self
    }

    /// Makes an intermediate server: its resources' capacity is what
    /// `parent` grants it (0 until the first grant), and its leases never
    /// outlive the parent's. [`Server::spawn_background`] also starts
    /// polling the parent.
    pub fn parent(mut self, parent: Parent) -> ServerBuilder<'a> {
        self.parent = Some(parent);
        self
    }

    /// Dials the parent over TLS as `tls` says (an address without a
    /// scheme as `https://`); the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or holds no PEM
    /// certificate or key.
    pub fn parent_tls(mut self, tls: &ClientTls) -> Result<ServerBuilder<'a>, TlsError> {
        self.parent_tls = Some(tls.load()?);
        Ok(self)
    }

    /// Serves over TLS as `tls` says (mutual TLS when it names a client
    /// CA); the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or used, or rustls
    /// refusing the setup.
    pub fn tls(mut self, tls: &ServerTls) -> Result<ServerBuilder<'a>, TlsError> {
        self.tls = Some(tls.rustls_config()?);
        Ok(self)
    }

    /// Runs [`Server::serve`]'s connections on `threads` threads (at least
    /// one), each with a single-threaded runtime of its own: a call is
    /// read, decided and answered on one thread. Without it (the default)
    /// the connections are tasks of the runtime that serves.
    pub fn threads(mut self, threads: usize) -> ServerBuilder<'a> {
        self.threads = Some(threads);
        self
    }

    /// Reaches the parent through `transport` instead of gRPC.
    #[cfg(feature = "in-process")]
    pub(crate) fn transport(mut self, transport: Arc<dyn Transport>) -> ServerBuilder<'a> {
        self.transport = Some(transport);
        self
    }

    /// The server.
    ///
    /// Call [`Server::spawn_background`] to sweep expired leases, and
    /// [`Server::serve`] to answer gRPC.
    pub fn build(self) -> Server {
        let single;
        let election = match self.election {
            Some(election) => election,
            None => {
                single = SingleElection::new(None);
                &single
            }
        };
        let parent = self.parent.map(|parent| {
            let transport = self
                .transport
                .unwrap_or_else(|| Arc::new(Grpc::with_tls(parent::DEADLINE, self.parent_tls)));
            ParentLink::new(parent, transport)
        });
        Server::assemble(
            Engine::new(self.config),
            View::new(election.subscribe()),
            self.clock.unwrap_or_else(|| Arc::new(SystemWallClock)),
            self.request_limits,
            parent,
            Serving {
                limits: self.limits,
                tls: self.tls,
                threads: self.threads,
            },
            election.readiness(),
        )
    }
}
