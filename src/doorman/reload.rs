//! Hot reload of the configuration file: on SIGHUP and when the file's
//! modification time changes; or, with the `etcd` feature, from an etcd
//! key as it changes (the [`etcd`] module). A bad new configuration is
//! logged and rejected; the server keeps serving the old one.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

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
            error!(path = %origin, error = %e, "rejected new configuration; still serving the previous one");
            false
        }
    }
}

fn mtime(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Spawns a task that reloads `path` on SIGHUP (on Unix) and whenever its
/// modification time changes, polled every `poll`.
///
/// The file's modification time is read before this returns, so any later
/// change triggers a reload.
pub fn spawn(server: Server, path: PathBuf, poll: Duration) {
    #[cfg(unix)]
    let hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            error!(error = %e, "cannot listen for SIGHUP; reloading on file change only");
            None
        }
    };
    #[cfg(not(unix))]
    let hup = None;
    spawn_inner(server, path, poll, hup);
}

/// As [`spawn`], with a SIGHUP listener the caller installed earlier (so
/// that SIGHUP was handled from the process's first moments).
#[cfg(unix)]
pub fn spawn_on(server: Server, path: PathBuf, poll: Duration, hup: tokio::signal::unix::Signal) {
    spawn_inner(server, path, poll, Some(hup));
}

#[cfg(unix)]
type Hangup = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Hangup = std::convert::Infallible;

fn spawn_inner(server: Server, path: PathBuf, poll: Duration, hup: Option<Hangup>) {
    let mut last = mtime(&path);
    #[cfg_attr(not(unix), allow(unused_mut, unused_variables))]
    let mut hup = hup;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = hangup => {
                    info!("SIGHUP: reloading configuration");
                    last = mtime(&path);
                    reload(&server, &path);
                }
                _ = tick.tick() => {
                    let now = mtime(&path);
                    if now != last {
                        last = now;
                        info!("configuration file changed: reloading");
                        reload(&server, &path);
                    }
                }
            }
        }
    });
}
