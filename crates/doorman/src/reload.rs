//! Hot reload of the configuration file: on SIGHUP and when the file's
//! modification time changes; or, with the `etcd` feature, from an etcd
//! key as it changes ([`EtcdConfigSource`]). A bad new configuration is
//! logged and rejected; the server keeps serving the old one.
//!
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdConfigSource`]: crate#features")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate_service::{reload_file, watch_file, Reload};

use super::config::{ServerConfig, ServerConfigError};
use super::server::Server;

#[cfg(feature = "etcd")]
mod etcd;

#[cfg(feature = "etcd")]
pub use etcd::EtcdConfigSource;

impl Reload for Server {
    type Config = ServerConfig;
    type Error = ServerConfigError;
    const WHAT: &'static str = "configuration";

    fn read_file(path: &Path) -> Result<ServerConfig, ServerConfigError> {
        ServerConfig::from_file(path)
    }

    fn parse(text: &str) -> Result<ServerConfig, ServerConfigError> {
        ServerConfig::from_yaml(text)
    }

    fn apply(&self, config: ServerConfig) {
        self.reload(config);
    }

    fn refused(&self) {
        self.count_refused_reload();
    }
}

/// Reloads `path` into `server`, logging the outcome. Returns whether the new
/// configuration was accepted.
pub fn reload(server: &Server, path: &Path) -> bool {
    reload_file(server, path)
}

/// Spawns a task that reloads `path` on SIGHUP (on Unix) and whenever its
/// modification time changes, polled every `poll`.
///
/// The file's modification time is read before this returns, so any later
/// change triggers a reload.
pub fn spawn(server: Server, path: PathBuf, poll: Duration) {
    watch_file(server, path, poll, tollgate_service::hangup());
}

/// As [`spawn`], with a SIGHUP listener the caller installed earlier (so
/// that SIGHUP was handled from the process's first moments).
#[cfg(unix)]
pub fn spawn_on(server: Server, path: PathBuf, poll: Duration, hup: tokio::signal::unix::Signal) {
    watch_file(server, path, poll, Some(hup));
}
