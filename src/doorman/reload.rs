//! Hot reload of the configuration file: on SIGHUP and when the file's
//! modification time changes; or, with the `etcd` feature, from an etcd
//! key as it changes (the [`etcd`] module). A bad new configuration is
//! logged and rejected; the server keeps serving the old one.

use std::path::PathBuf;
use std::time::Duration;

use crate::service::ErrorChain;
use tracing::{error, info};

use super::config::{Config, ConfigError};
use super::server::Server;

#[cfg(feature = "etcd")]
pub mod etcd;

/// Reloads `path` into `server`, logging the outcome. Returns whether the new
/// configuration was accepted.
pub fn reload(server: &Server, path: &std::path::Path) -> bool {
    apply(server, &path.display(), Config::from_file(path))
}

/// Applies a newly read configuration from `origin` (a file or an etcd
/// key, for the log): a valid one replaces the server's, an invalid one is
/// logged and the server keeps the previous one. Returns whether it was
/// applied.
fn apply(
    server: &Server,
    origin: &dyn std::fmt::Display,
    parsed: Result<Config, ConfigError>,
) -> bool {
    match parsed {
        Ok(config) => {
            server.reload(config);
            info!(path = %origin, "loaded configuration");
            true
        }
        Err(e) => {
            error!(path = %origin, error = %ErrorChain(&e), "rejected new configuration; still serving the previous one");
            false
        }
    }
}

/// Spawns a task that reloads `path` on SIGHUP (on Unix) and whenever its
/// modification time changes, polled every `poll`.
///
/// The file's modification time is read before this returns, so any later
/// change triggers a reload.
pub fn spawn(server: Server, path: PathBuf, poll: Duration) {
    spawn_inner(server, path, poll, crate::watch::hangup());
}

/// As [`spawn`], with a SIGHUP listener the caller installed earlier (so
/// that SIGHUP was handled from the process's first moments).
#[cfg(unix)]
pub fn spawn_on(server: Server, path: PathBuf, poll: Duration, hup: tokio::signal::unix::Signal) {
    spawn_inner(server, path, poll, Some(hup));
}

fn spawn_inner(server: Server, path: PathBuf, poll: Duration, hup: Option<crate::watch::Hangup>) {
    crate::watch::spawn(path, poll, hup, move |path| {
        reload(&server, path);
    });
}
