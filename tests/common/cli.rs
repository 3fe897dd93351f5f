//! A `tollgate` server process for the CLI tests: started with its log on a
//! pipe, asked for the address it logs, killed when the test ends.

use std::io::{BufRead as _, BufReader, Lines};
use std::process::{Child, ChildStderr, Command, Stdio};

/// The `tollgate` binary, as a command to add arguments to.
pub(crate) fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

/// A server process, killed when dropped (when the test ends, passing or
/// not).
pub(crate) struct Server {
    child: Child,
    log: Lines<BufReader<ChildStderr>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` with its log (info level, no colour) on a pipe.
pub(crate) fn start(command: &mut Command) -> Server {
    let mut child = command
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let log = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    Server { child, log }
}

impl Server {
    /// The value of `addr=` on the first log line from now on containing
    /// `marker`. Blocks: call it from `tokio::task::block_in_place` in an
    /// async test.
    pub(crate) fn logged_addr(&mut self, marker: &str) -> String {
        for line in self.log.by_ref().map_while(Result::ok) {
            let plain = strip_ansi(&line);
            if plain.contains(marker) {
                let at = plain.find("addr=").expect("the log line names its address");
                return plain[at + 5..]
                    .split_whitespace()
                    .next()
                    .expect("an address after addr=")
                    .to_owned();
            }
        }
        panic!("the server exited before logging {marker:?}");
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
