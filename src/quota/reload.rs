//! Hot reload of the quota configuration: on SIGHUP and when the file's
//! modification time changes. Buckets that still exist keep their tokens
//! and debt; a bad new file is logged and rejected, and the previous
//! configuration stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::{error, info};

use super::config::Config;
use super::service::Quota;

/// Reloads `path` into `quota`, logging the outcome. Returns whether the new
/// configuration was accepted.
pub fn reload(quota: &Quota, path: &Path) -> bool {
    match Config::from_file(path) {
        Ok(config) => {
            let removed = quota.reload(config);
            info!(path = %path.display(), removed, "loaded quota configuration");
            true
        }
        Err(e) => {
            error!(path = %path.display(), error = %e, "rejected new quota configuration; still serving the previous one");
            false
        }
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Spawns a task that reloads `path` on SIGHUP (on Unix) and whenever its
/// modification time changes, polled every `poll`.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn(quota: Arc<Quota>, path: PathBuf, poll: Duration) -> tokio::task::JoinHandle<()> {
    let mut last = mtime(&path);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
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
                    last = mtime(&path);
                    reload(&quota, &path);
                }
                _ = tick.tick() => {
                    let now = mtime(&path);
                    if now != last {
                        last = now;
                        reload(&quota, &path);
                    }
                }
            }
        }
    })
}
