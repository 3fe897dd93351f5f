//! One shape for hot reload, whatever the service and wherever its
//! configuration comes from: a file (on change and on SIGHUP, `watch.rs`)
//! or an etcd key (`etcd/watch.rs`). A service says how to read and parse
//! its configuration and how to put a new one in force ([`Reload`]); the
//! kit reads, applies and logs. A configuration that does not parse is
//! logged with its whole error chain and refused, and the service keeps
//! serving the previous one.

use std::error::Error;
use std::fmt::Display;
use std::path::Path;
use std::sync::Arc;

use tracing::{error, info};

use super::ErrorChain;

/// A service whose configuration is replaced whole while it runs.
pub trait Reload: Send + Sync + 'static {
    /// The parsed, valid configuration.
    type Config;
    /// Why a document is not a valid configuration.
    type Error: Error + 'static;
    /// What the log lines call the configuration: "configuration",
    /// "quota configuration", "throttle rules".
    const WHAT: &'static str;

    /// Reads and validates the configuration file at `path`.
    fn read_file(path: &Path) -> Result<Self::Config, Self::Error>;

    /// Parses and validates a configuration document.
    // Only an etcd key's watch parses documents.
    fn parse(text: &str) -> Result<Self::Config, Self::Error>;

    /// Puts a new configuration in force.
    fn apply(&self, config: Self::Config);

    /// Told that a new configuration was refused (it is logged already),
    /// for a metric; does nothing by default.
    fn refused(&self) {}
}

impl<R: Reload> Reload for Arc<R> {
    type Config = R::Config;
    type Error = R::Error;
    const WHAT: &'static str = R::WHAT;

    fn read_file(path: &Path) -> Result<R::Config, R::Error> {
        R::read_file(path)
    }

    fn parse(text: &str) -> Result<R::Config, R::Error> {
        R::parse(text)
    }

    fn apply(&self, config: R::Config) {
        R::apply(self, config);
    }

    fn refused(&self) {
        R::refused(self);
    }
}

/// Reloads the file at `path` into `target`, logging the outcome. Returns
/// whether the new configuration was applied.
pub fn reload_file<R: Reload>(target: &R, path: &Path) -> bool {
    apply_config(target, &path.display(), R::read_file(path))
}

/// Applies a newly read configuration from `origin` (a file or an etcd
/// key, for the log): a valid one is put in force, an invalid one is
/// logged and refused. Returns whether it was applied.
pub(crate) fn apply_config<R: Reload>(
    target: &R,
    origin: &dyn Display,
    parsed: Result<R::Config, R::Error>,
) -> bool {
    match parsed {
        Ok(config) => {
            target.apply(config);
            info!(path = %origin, "loaded {}", R::WHAT);
            true
        }
        Err(e) => {
            rejected(target, origin, &e);
            false
        }
    }
}

/// Logs that a new configuration from `origin` was refused, and why, and
/// tells `target`.
pub(crate) fn rejected<R: Reload>(target: &R, origin: &dyn Display, why: &(dyn Error + 'static)) {
    target.refused();
    error!(
        path = %origin,
        error = %ErrorChain(why),
        "rejected new {}; still serving the previous one",
        R::WHAT
    );
}
