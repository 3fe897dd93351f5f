//! A `tollgate` process for the tests of the command: started with one of
//! its output streams read into memory as it comes (so it never blocks on
//! a full pipe), asked for the lines and the address it logs, signalled,
//! and killed when the test ends.

use std::io::{BufRead as _, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A guard against hanging: how long any wait for the process may take
/// before the test fails. Never part of what a test asserts.
pub const HANG: Duration = Duration::from_secs(60);

/// The `tollgate` binary's path: cargo's `CARGO_BIN_EXE_tollgate` where
/// set, else the binary beside the running test's directory
/// (`target/<profile>/tollgate` for `target/<profile>/deps/<test>`), where
/// cargo puts it before it runs the command's tests.
///
/// # Panics
///
/// If there is no binary there (it is built by the `tollgate-cli` crate's
/// tests).
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_tollgate") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("the test's directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("the profile's directory");
    }
    let bin = dir.join(format!("tollgate{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} not found: the tollgate-cli crate's tests build it",
        bin.display()
    );
    bin
}

/// The `tollgate` binary, as a command to add arguments to.
pub fn tollgate() -> Command {
    Command::new(bin())
}

/// `tollgate <subcommand>` on loopback with free gRPC and debug ports
/// (`serve` and `quota` take the same flags for them).
pub fn on_free_ports(subcommand: &str) -> Command {
    let mut command = tollgate();
    command.args([
        subcommand,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--debug-port",
        "0",
    ]);
    command
}

/// The lines a process wrote to the stream being read, and whether the
/// stream has ended.
#[derive(Debug, Default)]
struct Lines {
    lines: Vec<String>,
    ended: bool,
}

/// [`Lines`] shared with the thread that reads them.
#[derive(Debug, Default)]
struct Log {
    state: Mutex<Lines>,
    grew: Condvar,
}

/// A process, killed when dropped (when the test ends, passing or not).
#[derive(Debug)]
pub struct Process {
    child: Child,
    log: Arc<Log>,
    /// Lines before this index were already matched by a
    /// [`Process::wait_line`]: the next wait looks only after it.
    seen: usize,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` with its log (info level, no colour) on stderr, read
/// into memory; stdout is discarded.
pub fn start(command: &mut Command) -> Process {
    command
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("tollgate runs");
    let stderr = child.stderr.take().expect("stderr is piped");
    Process::reading(child, stderr)
}

/// Starts `command` with its stdout read into memory (what
/// [`Process::wait_line`] and [`Process::logged`] see); stderr is discarded.
pub fn start_reading_stdout(command: &mut Command) -> Process {
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = command.spawn().expect("tollgate runs");
    let stdout = child.stdout.take().expect("stdout is piped");
    Process::reading(child, stdout)
}

impl Process {
    fn reading(child: Child, stream: impl Read + Send + 'static) -> Process {
        let log = Arc::new(Log::default());
        let sink = Arc::clone(&log);
        // Read for as long as the process runs, so it never blocks on a
        // full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                sink.state.lock().unwrap().lines.push(strip_ansi(&line));
                sink.grew.notify_all();
            }
            sink.state.lock().unwrap().ended = true;
            sink.grew.notify_all();
        });
        Process {
            child,
            log,
            seen: 0,
        }
    }

    /// The first line from now on (after the last one a wait matched)
    /// containing `text`, waiting at most [`HANG`]. Blocks: call it from
    /// `tokio::task::block_in_place` in an async test.
    ///
    /// # Panics
    ///
    /// If the stream ends or [`HANG`] passes first, with the lines read.
    pub fn wait_line(&mut self, text: &str) -> String {
        let deadline = Instant::now() + HANG;
        let mut state = self.log.state.lock().unwrap();
        loop {
            if let Some(i) = state.lines[self.seen..]
                .iter()
                .position(|l| l.contains(text))
            {
                self.seen += i + 1;
                return state.lines[self.seen - 1].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !state.ended && !left.is_zero(),
                "no line with {text:?} (the stream {}): {:#?}",
                if state.ended { "ended" } else { "went on" },
                state.lines
            );
            state = self.log.grew.wait_timeout(state, left).unwrap().0;
        }
    }

    /// The value of `addr=` on the first log line from now on containing
    /// `marker`, as [`Process::wait_line`] finds it.
    pub fn logged_addr(&mut self, marker: &str) -> String {
        let line = self.wait_line(marker);
        let at = line.find("addr=").expect("the log line names its address");
        line[at + 5..]
            .split_whitespace()
            .next()
            .expect("an address after addr=")
            .to_owned()
    }

    /// How many lines read so far contain `text`.
    pub fn logged(&self, text: &str) -> usize {
        let state = self.log.state.lock().unwrap();
        state.lines.iter().filter(|l| l.contains(text)).count()
    }

    /// Every line read so far.
    pub fn lines(&self) -> Vec<String> {
        self.log.state.lock().unwrap().lines.clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our
        // child's, which is not reaped before `self` is dropped or has
        // returned its exit status.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill({}, {signal})", self.child.id());
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits, at most [`HANG`], for the process to exit; returns its
    /// status. Blocks: call it from `tokio::task::block_in_place` in an
    /// async test.
    pub fn exit_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + HANG;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `line` without ANSI colour codes.
fn strip_ansi(line: &str) -> String {
    let mut plain = String::new();
    let mut in_escape = false;
    for c in line.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (false, c) => plain.push(c),
            _ => {}
        }
    }
    plain
}
