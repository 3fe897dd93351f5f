//! Hot reload of the configuration: on SIGHUP and when any file it is read
//! from is added, changed or removed. A configuration that does not load
//! is logged and refused, and the previous one keeps answering.
//!
//! # Implementation notes
//!
//! The watching is the service kit's `watch_file`: every `poll` it lists
//! the files a load reads (the file, or every file under the directory,
//! dot files aside) with each one's modification time and length, and
//! reloads when that list differs from the last one seen; a SIGHUP
//! reloads whatever the list says. Here is only the reload target.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tollgate_service::{hangup, reload_file, watch_file, Reload};

use super::config::{ConfigError, RlsConfig};
use super::service::RateLimitService;

/// The service as a reload target; `MERGE` is the documents' merge
/// setting ([`RlsConfig::load`]), `SHARED` whether the service counts in
/// a Redis store (which refuses what it cannot count,
/// [`RlsConfig::check_store`]).
#[derive(Debug)]
struct Target<const MERGE: bool, const SHARED: bool>(Arc<RateLimitService>);

impl<const MERGE: bool, const SHARED: bool> Target<MERGE, SHARED> {
    fn checked(config: RlsConfig) -> Result<RlsConfig, ConfigError> {
        if SHARED {
            config.check_store()?;
        }
        Ok(config)
    }
}

impl<const MERGE: bool, const SHARED: bool> Reload for Target<MERGE, SHARED> {
    type Config = RlsConfig;
    type Error = ConfigError;
    const WHAT: &'static str = "rate limit configuration";

    fn read_file(path: &Path) -> Result<RlsConfig, ConfigError> {
        RlsConfig::load(path, MERGE).and_then(Self::checked)
    }

    fn parse(text: &str) -> Result<RlsConfig, ConfigError> {
        RlsConfig::from_yaml("config", text).and_then(Self::checked)
    }

    fn apply(&self, config: RlsConfig) {
        self.0.set_config(config);
        self.0.metrics().config_load_success.inc();
    }

    fn refused(&self) {
        self.0.metrics().config_load_error.inc();
    }
}

/// Reloads `path` into `service` now, logging the outcome; with `merge`,
/// documents of one domain add up. Returns whether the new configuration
/// was applied.
pub fn reload(service: &Arc<RateLimitService>, path: &Path, merge: bool) -> bool {
    let service = Arc::clone(service);
    match (merge, service.store().is_some()) {
        (false, false) => reload_file(&Target::<false, false>(service), path),
        (false, true) => reload_file(&Target::<false, true>(service), path),
        (true, false) => reload_file(&Target::<true, false>(service), path),
        (true, true) => reload_file(&Target::<true, true>(service), path),
    }
}

/// Spawns a task that reloads `path` into `service` on SIGHUP (on Unix)
/// and whenever a file under it is added, changed or removed (checked
/// every `poll`); each outcome is logged, a refused configuration leaving
/// the previous one in force.
///
/// The files are listed before this returns, so any later change
/// triggers a reload.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_rls::{spawn_config_reload, RateLimitService, RlsConfig, RlsSettings, UnixClock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = std::path::PathBuf::from("/etc/ratelimit/config");
/// let config = RlsConfig::load(&dir, false)?;
/// let service = Arc::new(RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(UnixClock)));
/// spawn_config_reload(Arc::clone(&service), dir, false, Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn(
    service: Arc<RateLimitService>,
    path: PathBuf,
    merge: bool,
    poll: Duration,
) -> tokio::task::JoinHandle<()> {
    let hup = hangup();
    match (merge, service.store().is_some()) {
        (false, false) => watch_file(Target::<false, false>(service), path, poll, hup),
        (false, true) => watch_file(Target::<false, true>(service), path, poll, hup),
        (true, false) => watch_file(Target::<true, false>(service), path, poll, hup),
        (true, true) => watch_file(Target::<true, true>(service), path, poll, hup),
    }
}
