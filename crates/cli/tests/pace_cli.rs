//! `tollgate pace` as a process: thread counts beyond what the machine can
//! start, Ctrl-C, and the summary's figures agreeing with each other.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A guard against hanging, never part of what a test asserts.
const HANG: Duration = Duration::from_secs(120);

/// Runs `tollgate ARGS` to its end (killed after [`HANG`]).
fn tollgate(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > HANG {
            let _ = child.kill();
            panic!("tollgate {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last line of a `--format json` run: its summary.
fn summary(o: &Output) -> serde_json::Value {
    let out = text(&o.stdout);
    let last = out.lines().last().expect("a summary line");
    let summary: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(summary["type"], "summary", "{out}");
    summary
}

fn u64_of(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The documented most threads: on a machine that cannot start them, one
/// line saying which limit binds and what to do, before anything runs;
/// never an abort.
#[test]
fn more_threads_than_the_machine_allows_get_one_line_and_a_way_out() {
    let o = tollgate(&["pace", "1K", "--duration", "1s", "--threads", "100000"]);
    let err = text(&o.stderr);
    match o.status.code() {
        Some(0) => assert!(err.is_empty(), "{err}"),
        Some(1) => {
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with("error: "), "{err}");
            assert!(err.contains("use --async"), "{err}");
        }
        other => panic!("exit {other:?} (killed by a signal if None): {err}"),
    }
}

/// Each thread blocked in `acquire` when the run ends returns later with
/// one more op: it must not be reported beyond the ops run.
#[test]
fn the_callers_never_report_more_ops_than_ran() {
    for args in [
        &["100K", "--threads", "100"][..],
        &["100K", "--threads", "200", "--async"][..],
    ] {
        let mut argv = vec!["pace"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--duration", "500ms", "--format", "json"]);
        let o = tollgate(&argv);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let s = summary(&o);
        let (run, reported) = (u64_of(&s, "total_ops"), u64_of(&s, "lateness_ops"));
        assert!(run > 0, "{s}");
        assert!(reported <= run, "{reported} reported of {run} run: {s}");
    }
}

/// Tasks that never wait (at a rate no caller reaches) yield to the
/// runtime every 64 ops, holding what they recorded since their last
/// report: when the run ends, thousands are queued to be polled again, each
/// with counted ops to report, which takes the runtime far longer than a
/// line waits for stragglers (a quarter of its 10 ms interval). The end of
/// the run must wait for them: every op run is reported.
#[test]
fn async_callers_report_every_op_they_run() {
    let o = tollgate(&[
        "pace",
        "1e11",
        "--threads",
        "20000",
        "--async",
        "--duration",
        "500ms",
        "--interval",
        "10ms",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = summary(&o);
    let (run, reported) = (u64_of(&s, "total_ops"), u64_of(&s, "lateness_ops"));
    assert!(run > 0, "{s}");
    assert_eq!(reported, run, "{s}");
}

/// At a rate no caller can keep up with, the backlog grows to most of the
/// run; the limiter's mean wait must account for the ops admitted since
/// its last fill, not read 0.
#[test]
fn the_limiter_mean_wait_counts_ops_up_to_the_end() {
    let o = tollgate(&["pace", "1e11", "--duration", "300ms", "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = summary(&o);
    assert!(u64_of(&s, "backlog_ns") > 100_000_000, "{s}");
    assert!(u64_of(&s, "admitted") > 0, "{s}");
    assert!(u64_of(&s, "limiter_mean_wait_ns") > 0, "{s}");
}

#[test]
fn a_lowercase_m_is_named_in_the_start_line() {
    let o = tollgate(&["pace", "10m", "--duration", "100ms", "--interval", "100ms"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("tollgate pace 10M,1.1 (10m = 10M ops/s): 2 threads for 100ms"),
        "{out}"
    );
}

#[test]
fn careless_stalls_and_plots_are_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("x.png");
    for (args, start) in [
        (
            vec![
                "pace",
                "--duration",
                "1s",
                "--stall-at",
                "5s",
                "--stall-for",
                "1s",
            ],
            "error: --stall-at 5s is not within the run",
        ),
        (
            vec!["pace", "--duration", "1s", "--plot", png.to_str().unwrap()],
            "error: --plot ",
        ),
    ] {
        let o = tollgate(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.starts_with(start), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    }
    assert!(!png.exists(), "no file written");
}

/// Ctrl-C: the summary of what ran, the picture of it, and the exit status
/// of a command ended by SIGINT.
#[test]
fn ctrl_c_ends_the_run_with_its_summary_and_picture() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("pace.svg");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "pace",
            "1K",
            "--duration",
            "10m",
            "--interval",
            "100ms",
            "--format",
            "json",
            "--plot",
            svg.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The start line, then two interval lines: the run is under way.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(lines.next().expect("a line").unwrap());
    }
    assert!(seen[2].contains(r#""type":"interval""#), "{seen:?}");
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill with a valid signal on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < HANG, "pace did not exit after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert_eq!(err.trim(), format!("wrote {}", svg.display()));
    let last = rest.last().expect("a summary");
    let s: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(s["type"], "summary", "{last}");
    assert_eq!(s["interrupted"], true, "{last}");
    assert!(u64_of(&s, "total_ops") > 0, "{last}");
    assert!(s["elapsed_s"].as_f64().unwrap() < 600.0, "{last}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg "), "{picture}");
    assert!(picture.trim_end().ends_with("</svg>"));
    assert_eq!(picture.matches("<polyline").count(), 6);
}
