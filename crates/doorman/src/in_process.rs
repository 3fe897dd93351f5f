//! Servers and clients in one process, calling each other directly: the
//! transport of the `tollgate-simulate` crate, which runs a whole server
//! tree and its clients on one virtual clock (feature `in-process`).
//!
//! An [`InProcess`] holds the [`Server`]s by address; a [`Connection`] is one
//! caller's way in. [`server_through`] and [`client_through`] put a connection
//! in a [`ServerBuilder`] or a [`ClientBuilder`] instead of gRPC, and
//! [`watermark`] holds the rules of the etcd election, for a model of an
//! election on a shared store.
//!
#![cfg_attr(not(feature = "in-process"), doc = "```ignore")]
#![cfg_attr(feature = "in-process", doc = "```")]
//! use std::sync::Arc;
//! use tollgate_doorman::in_process::{self, InProcess};
//! use tollgate_doorman::{CapacitySource, Client, ResourceOptions, Server, ServerConfig, SingleElection};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One level of servers: a root alone.
//! let net = Arc::new(InProcess::new(1));
//! let election = SingleElection::new(Some("root:1".to_owned()));
//! let server = Server::builder(ServerConfig::builtin()).election(&election).build();
//! server.spawn_background(std::time::Duration::from_secs(1));
//! net.add("root:1", server, 0);
//!
//! let builder = Client::builder().server("root:1");
//! let client = in_process::client_through(builder, net.client_link(), 7).build()?;
//! let resource = client.resource("any", ResourceOptions::new(10.0))?;
//! resource.watch().wait_for(|c| c.source == CapacitySource::Lease).await?;
//! assert!(net.rpcs()[0] >= 1);
//! net.clear();
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation notes
//!
//! [`InProcess`] calls the [`Server`]s registered under addresses through
//! the same wire-level entry points the gRPC service uses, so requests and
//! answers take the same checks and conversions, and a whole server tree
//! and its clients run on one (virtual) clock with nothing between them but
//! the messages.
//!
//! Each caller reaches it through a [`Connection`] that names the caller's job
//! (none for a client): while a job is cut from its parent, every call over
//! its servers' link fails `unavailable`, as it would across a partition.
//! Calls are counted by the level of the server called. A job also has an
//! address of its own (`name:1`), which reaches its first live task, as a
//! load balancer in front of the job would; children dial their parent
//! there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tonic::Status;

use crate::pb;
use crate::transport::{Call, Transport};
use crate::{ClientBuilder, Server, ServerBuilder};
use tollgate_service::RwLockUnpoisoned;

/// The election's watermark rules (`election/watermark.rs`), for the
/// simulator's model of an election on a shared store.
pub mod watermark {
    pub use crate::election::watermark::{next, won, Found, Record};
}

/// `builder`'s server reaching its parent through `link` instead of gRPC.
pub fn server_through(builder: ServerBuilder<'_>, link: Arc<Connection>) -> ServerBuilder<'_> {
    builder.transport(link)
}

/// `builder`'s client calling its servers through `link` instead of gRPC,
/// its backoff's jitter seeded with `seed`, so that a run can be repeated.
pub fn client_through(builder: ClientBuilder, link: Arc<Connection>, seed: u64) -> ClientBuilder {
    builder.transport(link).seed(seed)
}

#[derive(Debug)]
struct Registered {
    server: Server,
    level: usize,
}

/// Servers in this process, by address; an unknown address is
/// `unavailable`, as a dead server would be.
#[derive(Debug)]
pub struct InProcess {
    servers: RwLock<HashMap<String, Registered>>,
    /// A job's own address, and its tasks' addresses in order.
    jobs: RwLock<HashMap<String, Vec<String>>>,
    /// Calls answered or refused, by the level of the server called.
    /// Relaxed: plain counters read between virtual instants.
    rpcs: Vec<AtomicU64>,
    /// Whether each job is cut from its parent. Relaxed: set and read on
    /// the simulation's one thread.
    cut: RwLock<Vec<Arc<AtomicBool>>>,
}

/// One caller's way into [`InProcess`].
#[derive(Debug)]
pub struct Connection {
    net: Arc<InProcess>,
    cut: Option<Arc<AtomicBool>>,
}

impl InProcess {
    /// A transport for a tree of `levels` levels.
    pub fn new(levels: usize) -> InProcess {
        InProcess {
            servers: RwLock::default(),
            jobs: RwLock::default(),
            rpcs: (0..levels).map(|_| AtomicU64::new(0)).collect(),
            cut: RwLock::default(),
        }
    }

    /// Registers job number `job` (in order from 0) with its own address
    /// and its tasks' addresses; returns the link its servers call through.
    pub fn add_job(
        self: &Arc<Self>,
        job: usize,
        address: String,
        tasks: Vec<String>,
    ) -> Arc<Connection> {
        self.jobs.write_unpoisoned().insert(address, tasks);
        let mut cut = self.cut.write_unpoisoned();
        debug_assert_eq!(cut.len(), job);
        let flag = Arc::new(AtomicBool::new(false));
        cut.push(flag.clone());
        Arc::new(Connection {
            net: self.clone(),
            cut: Some(flag),
        })
    }

    /// The link clients call through.
    pub fn client_link(self: &Arc<Self>) -> Arc<Connection> {
        Arc::new(Connection {
            net: self.clone(),
            cut: None,
        })
    }

    /// Makes `server`, of level `level`, reachable at `address`.
    pub fn add(&self, address: impl Into<String>, server: Server, level: usize) {
        self.servers
            .write_unpoisoned()
            .insert(address.into(), Registered { server, level });
    }

    /// Makes `address` unreachable, as a dead server.
    pub fn remove(&self, address: &str) {
        self.servers.write_unpoisoned().remove(address);
    }

    /// Cuts job `job` from its parent, or heals the cut.
    pub fn set_cut(&self, job: usize, cut: bool) {
        self.cut.read_unpoisoned()[job].store(cut, Ordering::Relaxed);
    }

    /// Calls so far to the servers of each level.
    pub fn rpcs(&self) -> Vec<u64> {
        self.rpcs
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Makes every server unreachable (and breaks the reference cycle
    /// between the servers and a transport they use themselves).
    pub fn clear(&self) {
        self.servers.write_unpoisoned().clear();
    }

    fn call<T: Send + 'static>(
        &self,
        address: &str,
        f: impl FnOnce(&Server) -> Result<T, Status>,
    ) -> Call<T> {
        let servers = self.servers.read_unpoisoned();
        let mut entry = servers.get(address);
        if entry.is_none() {
            if let Some(tasks) = self.jobs.read_unpoisoned().get(address) {
                entry = tasks.iter().find_map(|t| servers.get(t));
            }
        }
        let result = match entry {
            Some(e) => {
                self.rpcs[e.level].fetch_add(1, Ordering::Relaxed);
                f(&e.server)
            }
            None => Err(Status::unavailable(format!("no server at {address}"))),
        };
        Box::pin(std::future::ready(result))
    }
}

impl Connection {
    fn call<T: Send + 'static>(
        &self,
        address: &str,
        f: impl FnOnce(&Server) -> Result<T, Status>,
    ) -> Call<T> {
        if self.cut.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            let refused = Err(Status::unavailable(format!("partitioned from {address}")));
            return Box::pin(std::future::ready(refused));
        }
        self.net.call(address, f)
    }
}

impl Transport for Connection {
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
