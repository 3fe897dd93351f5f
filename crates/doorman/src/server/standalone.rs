//! [`Standalone`]: a whole lease server as `tollgate serve` runs it, put
//! together from plain options: the configuration (a file reloaded on
//! change and on SIGHUP, or an etcd key watched), the election (single, or
//! on etcd), the parent of an intermediate server, the debug port, and
//! serving until shutdown with mastership handed over first.

use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::signal::unix::Signal;
use tracing::{info, warn};

use super::{Parent, Server};
use crate::config::ServerConfig;
use crate::election::etcd::{Etcd as EtcdElection, EtcdConfig as EtcdElectionConfig};
use crate::election::single::SingleElection;
use crate::election::Election;
use crate::{debug, reload, EtcdConfigSource};
use tollgate_service::{ClientTls, ServerLimits, ServerTls};

/// Everything a lease server process assembles around a [`Server`]; start
/// from [`Standalone::default`] and set what differs, then
/// [`run`](Standalone::run) it.
///
/// # Examples
///
/// ```
/// use tollgate_doorman::{Client, ResourceOptions, Standalone};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let address = listener.local_addr()?.to_string();
/// let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let serving = tokio::spawn(Standalone::default().run(listener, async { let _ = stopped.await; }, hup));
///
/// let client = Client::builder().server(address).build()?;
/// let resource = client.resource("any", ResourceOptions::new(10.0))?;
/// resource.watch().wait_for(|c| c.capacity == 10.0).await?;
/// stop.send(()).unwrap();
/// serving.await.unwrap()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Standalone {
    /// The resource configuration: a file, reloaded every
    /// `reload_interval` when it changes and on SIGHUP, or `etcd:KEY` to
    /// read it from etcd key KEY at `etcd_endpoints` and apply every
    /// change put there. `None`: every resource shares 1000 units by
    /// FAIR_SHARE ([`ServerConfig::builtin`]).
    pub config: Option<PathBuf>,
    /// How often the configuration file is checked for changes.
    pub reload_interval: Duration,
    /// Where the HTTP debug port listens (`/debug/status`, `/metrics`,
    /// `/healthz`); `None` for none.
    pub debug: Option<SocketAddr>,
    /// The address clients reach this server at, reported by Discovery;
    /// `None`: the listener's own address.
    pub advertise: Option<String>,
    /// How often expired leases and idle resources are swept.
    pub sweep_interval: Duration,
    /// etcd endpoints: elect a master among the servers sharing
    /// `election_key`; empty for a lone master.
    pub etcd_endpoints: Vec<String>,
    /// How etcd is reached over TLS, if it is.
    pub etcd_tls: Option<ClientTls>,
    /// The etcd election key.
    pub election_key: String,
    /// The etcd lease TTL: how long a master that cannot reach etcd keeps
    /// mastership.
    pub election_ttl: Duration,
    /// The parent of an intermediate server (its `server_id` defaults to
    /// the advertised address when empty).
    pub parent: Option<Parent>,
    /// How the parent is dialled over TLS, if it is.
    pub parent_tls: Option<ClientTls>,
    /// Serving over TLS, if set.
    pub tls: Option<ServerTls>,
    /// The transport limits.
    pub limits: ServerLimits,
    /// Threads for the connections ([`ServerBuilder::threads`](super::ServerBuilder::threads)).
    pub threads: Option<usize>,
}

impl Default for Standalone {
    fn default() -> Standalone {
        Standalone {
            config: None,
            reload_interval: Duration::from_secs(5),
            debug: None,
            advertise: None,
            sweep_interval: Duration::from_secs(5),
            etcd_endpoints: Vec::new(),
            etcd_tls: None,
            election_key: "/tollgate/master".to_owned(),
            election_ttl: Duration::from_secs(10),
            parent: None,
            parent_tls: None,
            tls: None,
            limits: ServerLimits::default(),
            threads: None,
        }
    }
}

/// Where the resource configuration comes from.
enum Source {
    /// A file, reloaded on change and on SIGHUP.
    File(PathBuf),
    /// An etcd key, watched.
    Etcd(String),
    /// No configuration given: the built-in template.
    Builtin,
}

impl Standalone {
    /// Serves on `listener` until `shutdown` completes, then resigns
    /// mastership (on etcd) and drains in-flight RPCs for at most
    /// [`ServerLimits::drain_timeout`]. `hup` (SIGHUP) reloads a
    /// configuration file; it is ignored otherwise.
    ///
    /// # Errors
    ///
    /// A configuration that cannot be read, an `etcd:` configuration
    /// without endpoints, a decay factor outside `(0, 1]`, a parent that is
    /// this server itself, an etcd endpoint, TLS file or debug port that
    /// cannot be used, or an error serving ([`Server::serve`]). Each is one
    /// line that names the option.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        hup: Signal,
    ) -> Result<(), Box<dyn Error + Send + Sync>> {
        let source = self.source()?;
        let (config, etcd_config) = match &source {
            Source::File(path) => (
                ServerConfig::from_file(path)
                    .map_err(|e| format!("loading {}: {e}", path.display()))?,
                None,
            ),
            Source::Etcd(key) => {
                let source = match &self.etcd_tls {
                    None => EtcdConfigSource::new(&self.etcd_endpoints, key.clone()),
                    Some(tls) => EtcdConfigSource::new_tls(&self.etcd_endpoints, key.clone(), tls),
                }?;
                let (config, revision) = source.load().await?;
                info!(key, revision, "loaded configuration from etcd");
                (config, Some((source, revision)))
            }
            Source::Builtin => {
                info!("no configuration given: serving the built-in catch-all FAIR_SHARE template");
                (ServerConfig::builtin(), None)
            }
        };
        let local = listener.local_addr()?;
        let advertised = self.advertise.clone().unwrap_or_else(|| local.to_string());
        self.warn_if_unreachable(&advertised);
        let etcd = if self.etcd_endpoints.is_empty() {
            None
        } else {
            info!(endpoints = ?self.etcd_endpoints, key = self.election_key, "etcd election");
            // The watermark covers the longest lease and an election TTL
            // more; servers' clocks may differ by up to a second.
            let config = EtcdElectionConfig {
                endpoints: self.etcd_endpoints.clone(),
                key: self.election_key.clone(),
                ttl: self.election_ttl,
                advertise: advertised.clone(),
                promise: config.longest_lease_length() + self.election_ttl,
                clock_skew: Duration::from_secs(1),
            };
            Some(match &self.etcd_tls {
                None => EtcdElection::start(config)?,
                Some(tls) => EtcdElection::start_tls(config, tls)?,
            })
        };
        let single = SingleElection::new(Some(advertised.clone()));
        let election: &dyn Election = match &etcd {
            Some(e) => e,
            None => &single,
        };
        let mut builder = Server::builder(config)
            .election(election)
            .limits(self.limits.clone());
        if let Some(threads) = self.threads {
            builder = builder.threads(threads);
        }
        if let Some(tls) = &self.tls {
            builder = builder.tls(tls)?;
        }
        if let Some(parent) = &self.parent {
            if !(parent.decay_factor > 0.0 && parent.decay_factor <= 1.0) {
                return Err("--decay-factor must be in (0, 1]".into());
            }
            if is_self(&parent.address, local, &advertised).await {
                return Err(format!(
                    "--parent {} is this server itself (listening on {local}): an intermediate \
                     server asks another server, its parent, for capacity",
                    parent.address
                )
                .into());
            }
            info!(parent = parent.address, "intermediate server");
            let mut parent = parent.clone();
            if parent.server_id.is_empty() {
                parent.server_id = advertised.clone();
            }
            builder = builder.parent(parent);
            if let Some(tls) = &self.parent_tls {
                builder = builder.parent_tls(tls)?;
            }
        }
        let server = builder.build();
        server.spawn_background(self.sweep_interval);
        match source {
            Source::File(path) => reload::spawn_on(server.clone(), path, self.reload_interval, hup),
            Source::Etcd(_) | Source::Builtin => {
                if let Some((source, revision)) = etcd_config {
                    source.spawn(server.clone(), revision);
                }
                let mut hup = hup;
                let why = if self.config.is_some() {
                    "SIGHUP ignored: the configuration is watched in etcd"
                } else {
                    "SIGHUP ignored: serving without a configuration, nothing to reload"
                };
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        info!("{why}");
                    }
                });
            }
        }
        let (resigned_tx, resigned) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown.await;
            // Hand mastership over first, at once: followers take over
            // while this server drains.
            if let Some(etcd) = etcd {
                etcd.resign().await;
                info!("resigned mastership");
            }
            let _ = resigned_tx.send(());
        };
        if let Some(daddr) = self.debug {
            let dl = TcpListener::bind(daddr)
                .await
                .map_err(|e| format!("binding debug port {daddr}: {e}"))?;
            info!(addr = %dl.local_addr()?, "debug HTTP listening");
            let s = server.clone();
            tokio::spawn(async move {
                if let Err(e) = debug::serve(s, dl, std::future::pending()).await {
                    tracing::error!(error = %e, "debug HTTP server failed");
                }
            });
        }
        let limits = &self.limits;
        match &self.tls {
            Some(tls) => {
                info!(addr = %local, limits = ?limits, tls = ?tls, "gRPC listening over TLS")
            }
            None => info!(addr = %local, limits = ?limits, "gRPC listening"),
        }
        server.serve(listener, shutdown).await?;
        if resigned.await.is_ok() {
            info!("stopped");
        }
        Ok(())
    }

    /// Where the configuration comes from.
    fn source(&self) -> Result<Source, String> {
        let Some(path) = &self.config else {
            return Ok(Source::Builtin);
        };
        let Some(key) = path.to_str().and_then(|p| p.strip_prefix("etcd:")) else {
            return Ok(Source::File(path.clone()));
        };
        if key.is_empty() {
            return Err("--config etcd:KEY needs a key, e.g. etcd:/tollgate/config".into());
        }
        if self.etcd_endpoints.is_empty() {
            return Err(format!(
                "--config {} reads etcd: give its endpoints with --etcd-endpoints",
                path.display()
            ));
        }
        Ok(Source::Etcd(key.to_owned()))
    }

    /// Warns when the address others are given to reach this server is a
    /// wildcard (`0.0.0.0:15000`, listening on every interface), where it
    /// matters: followers of an election redirect clients to it, and a
    /// parent tells its intermediates apart by it.
    fn warn_if_unreachable(&self, advertised: &str) {
        let wildcard = advertised
            .parse::<SocketAddr>()
            .is_ok_and(|a| a.ip().is_unspecified());
        if !wildcard {
            return;
        }
        if !self.etcd_endpoints.is_empty() {
            warn!(
                advertise = advertised,
                "the advertised address is a wildcard: followers will redirect clients to an \
                 address they cannot reach; give this server's own with --advertise HOST:PORT"
            );
        }
        if self.parent.as_ref().is_some_and(|p| p.server_id.is_empty()) {
            warn!(
                server_id = advertised,
                "the id this server gives its parent is a wildcard address, the same for every \
                 intermediate listening on this port; give --advertise HOST:PORT or --server-id"
            );
        }
    }
}

/// Whether `parent` (`host:port`, with or without a scheme) names this
/// server, which listens on `local` and is advertised as `advertised`:
/// the same address, or the same port on an address of this machine when
/// this server listens on every interface (`0.0.0.0`, `::`). A parent
/// whose name does not resolve is not this server.
async fn is_self(parent: &str, local: SocketAddr, advertised: &str) -> bool {
    let bare = parent
        .split_once("://")
        .map_or(parent, |(_, rest)| rest)
        .trim_end_matches('/');
    if bare == advertised {
        return true;
    }
    let Ok(addrs) = tokio::net::lookup_host(bare).await else {
        return false;
    };
    addrs.into_iter().any(|a| {
        a.port() == local.port()
            && (a.ip() == local.ip()
                || a.ip().is_unspecified()
                || (local.ip().is_unspecified()
                    && (a.ip().is_loopback() || of_this_machine(a.ip()))))
    })
}

/// Whether `ip` is an address of this machine: one a socket can bind.
fn of_this_machine(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_parent_naming_this_server_is_found_by_address_or_name() {
        let local: SocketAddr = "127.0.0.1:15000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:15000".parse().unwrap();
        for parent in [
            "127.0.0.1:15000",
            "localhost:15000",
            "http://127.0.0.1:15000",
            "0.0.0.0:15000",
        ] {
            assert!(is_self(parent, local, "127.0.0.1:15000").await, "{parent}");
            assert!(is_self(parent, any, "0.0.0.0:15000").await, "{parent}");
        }
        assert!(is_self("doorman-1.test:15000", any, "doorman-1.test:15000").await);
        assert!(!is_self("127.0.0.1:15001", local, "127.0.0.1:15000").await);
        assert!(!is_self("192.0.2.1:15000", any, "0.0.0.0:15000").await);
        assert!(!is_self("no-such-host.invalid:15000", any, "0.0.0.0:15000").await);
    }
}
