//! Hot reload of the quota configuration: on SIGHUP and when the file's
//! modification time changes. Buckets that still exist keep their tokens
//! and debt; a bad new file is logged and rejected, and the previous
//! configuration stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::service::ErrorChain;
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
            error!(path = %path.display(), error = %ErrorChain(&e), "rejected new quota configuration; still serving the previous one");
            false
        }
    }
}

/// Spawns a task that reloads `path` on SIGHUP (on Unix) and whenever its
/// modification time changes, polled every `poll`.
///
/// The file's modification time is read before this returns, so any later
/// change triggers a reload.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn(quota: Arc<Quota>, path: PathBuf, poll: Duration) -> tokio::task::JoinHandle<()> {
    crate::watch::spawn(path, poll, crate::watch::hangup(), move |path| {
        reload(&quota, path);
    })
}
