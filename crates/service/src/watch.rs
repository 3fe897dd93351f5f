//! Watching a configuration file for hot reload: a task that reloads it
//! into a service ([`Reload`]) on SIGHUP (on Unix) and whenever the file's
//! modification time changes.
//!
//! # Implementation notes
//!
//! The file's modification time is read when the task is spawned and again
//! every `poll`; a reload happens when it differs from the last one seen. A
//! SIGHUP reloads whatever the modification time, and records the current
//! one, so the poll that follows does not reload the same file again.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tracing::{error, info};

use super::reload::{reload_file, Reload};

/// A SIGHUP listener; on other platforms there is none to have.
#[cfg(unix)]
pub(crate) type Hangup = tokio::signal::unix::Signal;
/// A SIGHUP listener; on other platforms there is none to have.
#[cfg(not(unix))]
pub(crate) type Hangup = std::convert::Infallible;

/// Listens for SIGHUP; `None` (logged) where that fails.
///
/// # Panics
///
/// Outside a tokio runtime.
#[cfg(unix)]
pub fn hangup() -> Option<Hangup> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            error!(error = %e, "cannot listen for SIGHUP; reloading on file change only");
            None
        }
    }
}

/// There is no SIGHUP off Unix.
#[cfg(not(unix))]
pub fn hangup() -> Option<Hangup> {
    None
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Spawns a task that reloads `path` into `target` on each signal from
/// `hup` and whenever the file's modification time changes, polled every
/// `poll`; each outcome is logged ([`reload_file`]).
///
/// The modification time is read before this returns, so any later change
/// triggers a reload.
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn watch_file<R: Reload>(
    target: R,
    path: PathBuf,
    poll: Duration,
    hup: Option<Hangup>,
) -> tokio::task::JoinHandle<()> {
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
                    info!(path = %path.display(), "SIGHUP: reloading configuration");
                    last = mtime(&path);
                    reload_file(&target, &path);
                }
                _ = tick.tick() => {
                    let now = mtime(&path);
                    if now != last {
                        last = now;
                        info!(path = %path.display(), "configuration file changed: reloading");
                        reload_file(&target, &path);
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts the configurations applied; a configuration is the file's
    /// text.
    #[derive(Debug, Default)]
    struct Counter(AtomicUsize);

    impl Reload for Counter {
        type Config = String;
        type Error = std::io::Error;
        const WHAT: &'static str = "counted text";

        fn read_file(path: &Path) -> Result<String, std::io::Error> {
            std::fs::read_to_string(path)
        }

        fn parse(text: &str) -> Result<String, std::io::Error> {
            Ok(text.to_owned())
        }

        fn apply(&self, _: String) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Tokio's paused clock drives the polls; only the file's modification
    /// time is real, and it is set explicitly.
    #[tokio::test(start_paused = true)]
    async fn a_changed_modification_time_reloads_once() {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-watch-unit-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "a").unwrap();
        let counter = Arc::new(Counter::default());
        let task = watch_file(
            Arc::clone(&counter),
            path.clone(),
            Duration::from_secs(1),
            None,
        );

        // Five polls of an unchanged file.
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 0);

        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(10))
            .unwrap();
        // The next poll sees the change; the five after it do not reload again.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 1);

        // A file that cannot be read is refused, and nothing is applied.
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 1);
        task.abort();
    }
}
