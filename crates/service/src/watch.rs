//! Watching a configuration file, or a directory of them, for hot reload:
//! a task that reloads it into a service ([`Reload`]) on SIGHUP (on Unix)
//! and whenever a file of it is added, changed or removed.
//!
//! # Implementation notes
//!
//! Every `poll` the watcher lists the files a load reads (the file, or
//! every file under the directory, dot files aside: [`files_under`]) with
//! each one's modification time and length, and reloads when that list
//! differs from the last one seen. A file edited in place changes its own
//! time but not its directory's, so the directory's time alone would miss
//! it; the length catches a rewrite within the clock's resolution.
//! Polling rather than inotify: a handful of `stat` calls a second cost
//! nothing beside a server's work, add no dependency, and see what
//! inotify watches misread, such as a Kubernetes ConfigMap's directory
//! swapped through a symlink, or a network filesystem. A SIGHUP reloads
//! whatever the list says, and records it, so the poll that follows does
//! not reload the same files again.

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

/// The files a configuration `path` names: itself, or the regular files
/// under it (recursively, in name order, dot files skipped).
///
/// # Errors
///
/// The path that cannot be read (`path` or a directory under it), and
/// why.
pub fn files_under(path: &Path) -> Result<Vec<PathBuf>, (PathBuf, std::io::Error)> {
    let meta = std::fs::metadata(path).map_err(|e| (path.to_owned(), e))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    let mut dirs = vec![path.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| (dir.clone(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| (dir.clone(), e))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A file's path, modification time and length.
type Seen = (PathBuf, Option<SystemTime>, u64);

/// The files of `path` ([`files_under`]), each with its modification time
/// and length; `None` where `path` cannot be listed (the load says why).
fn files(path: &Path) -> Option<Vec<Seen>> {
    let files = files_under(path).ok()?;
    Some(
        files
            .into_iter()
            .map(|f| {
                let meta = std::fs::metadata(&f).ok();
                let modified = meta.as_ref().and_then(|m| m.modified().ok());
                let len = meta.map_or(0, |m| m.len());
                (f, modified, len)
            })
            .collect(),
    )
}

/// Spawns a task that reloads `path` (a file, or a directory of them)
/// into `target` on each signal from `hup` and whenever a file of it is
/// added, changed or removed (its modification time or length), polled
/// every `poll`; each outcome is logged ([`reload_file`]).
///
/// The files are listed before this returns, so any later change
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
    let mut last = files(&path);
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
                Some(_) = hangup => {
                    info!(path = %path.display(), "SIGHUP: reloading configuration");
                    last = files(&path);
                    reload_file(&target, &path);
                }
                _ = tick.tick() => {
                    let now = files(&path);
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

        /// The text of every file of `path`, a file or a directory.
        fn read_file(path: &Path) -> Result<String, std::io::Error> {
            let files = files_under(path).map_err(|(_, e)| e)?;
            let mut text = String::new();
            for file in files {
                text.push_str(&std::fs::read_to_string(file)?);
            }
            Ok(text)
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

    /// Sets `path`'s modification time to `at`.
    fn touch(path: &Path, at: SystemTime) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(at).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_of_a_directory_edited_in_place_reloads_once() {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-watch-unit-")
            .tempdir()
            .unwrap();
        let sub = dir.path().join("domain");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("config.yaml");
        std::fs::write(&file, "a").unwrap();
        std::fs::write(dir.path().join(".hidden"), "x").unwrap();
        let then = SystemTime::now() - Duration::from_secs(100);
        touch(&file, then);
        let counter = Arc::new(Counter::default());
        let task = watch_file(
            Arc::clone(&counter),
            dir.path().to_owned(),
            Duration::from_secs(1),
            None,
        );
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 0);

        // Rewritten in place, two levels down: the directories' times do
        // not change, the file's does.
        std::fs::write(&file, "b").unwrap();
        touch(&file, then + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 1);

        // A longer text at the same time (within the clock's resolution).
        std::fs::write(&file, "bb").unwrap();
        touch(&file, then + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 2);

        // A dot file is not the configuration's.
        std::fs::write(dir.path().join(".hidden"), "changed").unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 2);

        // A file added.
        std::fs::write(sub.join("more.yaml"), "c").unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(counter.0.load(Ordering::Relaxed), 3);
        task.abort();
    }

    #[test]
    fn the_files_under_a_directory_are_listed_in_order_dot_files_aside() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        for f in ["z.yaml", "b/c/x.yaml", "b/a.yaml", ".git/head", ".swp"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let names: Vec<String> = files_under(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["b/a.yaml", "b/c/x.yaml", "z.yaml"]);
        let file = dir.path().join("z.yaml");
        assert_eq!(files_under(&file).unwrap(), [file]);
        let gone = dir.path().join("none");
        assert_eq!(files_under(&gone).unwrap_err().0, gone);
    }
}
