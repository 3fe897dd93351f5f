//! Hot reload of the quota configuration: on SIGHUP and when the file's
//! modification time changes. The file is read with the admin API's
//! changes on top ([`load_config`](super::load_config)). Buckets that still exist keep their tokens
//! and debt; a bad new file is logged and rejected, and the previous
//! configuration stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use tollgate_service::{reload_file, watch_file, Reload};

use super::config::{QuotaConfig, QuotaConfigError};
use super::service::Quota;

impl Reload for Quota {
    type Config = QuotaConfig;
    type Error = QuotaConfigError;
    const WHAT: &'static str = "quota configuration";

    fn read_file(path: &Path) -> Result<QuotaConfig, QuotaConfigError> {
        super::overlay::load(path)
    }

    fn parse(text: &str) -> Result<QuotaConfig, QuotaConfigError> {
        QuotaConfig::from_yaml(text)
    }

    fn apply(&self, config: QuotaConfig) {
        let removed = self.reload(config);
        if removed > 0 {
            info!(removed, "removed the buckets no longer configured");
        }
    }
}

/// Reloads `path` into `quota`, logging the outcome. Returns whether the new
/// configuration was accepted.
pub fn reload(quota: &Quota, path: &Path) -> bool {
    reload_file(quota, path)
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
    watch_file(quota, path, poll, tollgate_service::hangup())
}
