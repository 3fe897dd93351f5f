//! The `tollgate` command as an operator meets it: bad input refused by the
//! parser with a clear message, errors without backtraces, logs on stderr
//! (JSON on request, no colour when redirected), help with examples, and a
//! lease client that gives up on a dead server.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `tollgate ARGS` with `RUST_BACKTRACE=1` (as many users have it),
/// killing it if it has not exited after a minute: a hang guard, not a
/// timing assertion.
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
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("tollgate {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A local address nothing listens on.
fn dead_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn zero_counts_are_refused_by_the_parser() {
    for args in [
        &["serve", "--threads", "0"][..],
        &["load", "--threads", "0"],
        &["load", "--clients", "0"],
        &["quota", "--config", "q.yaml", "--threads", "0"],
        &["lease", "a", "--count", "0"],
    ] {
        let o = tollgate(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("must be at least 1"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn durations_share_one_grammar_and_refuse_negatives() {
    for args in [
        &["load", "--duration", "-1s"][..],
        &["load", "--duration", "-1"],
        &["pace", "--duration", "-1s"],
        &["pace", "--stall-at", "-1s", "--stall-for", "1s"],
        &["serve", "--sweep-interval", "-5s"],
        &["serve", "--request-timeout", "-1s"],
        &["lease", "a", "--timeout", "-2s"],
        &["quota", "--config", "q.yaml", "--reap-interval", "-1s"],
    ] {
        let o = tollgate(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("cannot be negative"), "{args:?}: {err}");
        assert!(!err.contains("tip:"), "{args:?}: {err}");
    }
    for args in [
        &["lease", "a", "--timeout", "0s"][..],
        &["serve", "--reload-interval", "0s"],
    ] {
        let o = tollgate(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("must be more than zero"), "{args:?}: {err}");
    }
    // A bare number has no unit: refused with the grammar in the message.
    let o = tollgate(&["load", "--duration", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("5s, 250ms"), "{}", stderr(&o));
    // `load --duration 5s` parses: the run fails later, on the dead server.
    let dead = dead_address();
    let o = tollgate(&["load", "--duration", "5s", "--server", &dead]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("connecting to {dead}")), "{err}");
}

#[test]
fn user_errors_print_one_line_without_a_backtrace() {
    let o = tollgate(&["simulate", "--scenario", "99", "--out", "target/cli-test"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "error: unknown scenario 99: the scenarios are 1 to 7"
    );
    let o = tollgate(&[
        "serve",
        "--config",
        "/nonexistent/doorman.yaml",
        "--port",
        "0",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: loading /nonexistent/doorman.yaml: "),
        "{err}"
    );
    assert!(!err.contains("backtrace"), "{err}");
    assert!(!err.contains("Caused by"), "{err}");
}

#[test]
fn every_subcommand_has_examples_in_its_help() {
    for sub in ["pace", "serve", "load", "lease", "simulate", "quota"] {
        let o = tollgate(&[sub, "--help"]);
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(o.status.success(), "{sub}");
        assert!(out.contains("Examples:"), "{sub}: {out}");
        assert!(out.contains(&format!("tollgate {sub}")), "{sub}: {out}");
        assert!(out.contains("--log-format"), "{sub}: {out}");
    }
}

#[test]
fn lease_gives_up_on_a_dead_server_with_one_line_warnings() {
    let dead = dead_address();
    let o = tollgate(&[
        "lease",
        "a",
        "--server",
        &dead,
        "--count",
        "1",
        "--timeout",
        "1s",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty(), "{err}");
    let last = err.lines().last().unwrap();
    let tried = format!("error: no answer from {dead} within 1s (the last try: {dead}: ");
    assert!(last.starts_with(&tried), "{last}");
    assert!(
        last.ends_with("): is the server running and reachable?"),
        "{last}"
    );
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(!warnings.is_empty(), "{err}");
    for w in warnings {
        assert!(w.contains("capacity refresh failed"), "{w}");
        assert!(w.contains("Unavailable: tcp connect error"), "{w}");
        assert!(!w.contains("tonic::transport"), "{w}");
        assert!(!w.contains('\u{1b}'), "colour in a redirected log: {w}");
    }
}

#[test]
fn log_format_json_writes_one_object_a_line_on_stderr() {
    let dead = dead_address();
    let o = tollgate(&[
        "--log-format",
        "json",
        "lease",
        "a",
        "--server",
        &dead,
        "--timeout",
        "1s",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let events: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!events.is_empty(), "{err}");
    for e in &events {
        assert_eq!(e["level"], "WARN", "{e}");
        assert_eq!(e["fields"]["message"], "capacity refresh failed", "{e}");
    }
}

#[test]
fn pace_plot_writes_an_svg_picture() {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pace.svg");
    let o = tollgate(&[
        "pace",
        "2K",
        "--duration",
        "300ms",
        "--interval",
        "100ms",
        "--format",
        "json",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim(), format!("wrote {}", path.display()));
    let summary = String::from_utf8(o.stdout).unwrap();
    let summary: serde_json::Value = serde_json::from_str(summary.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    assert!(summary["lateness_mean_ns"].is_u64(), "{summary}");
    assert!(summary["limiter_mean_wait_ns"].is_u64(), "{summary}");
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // Well formed: every element closed, one root.
    let opened = svg.matches('<').count();
    assert_eq!(opened, svg.matches('>').count());
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    for text in [
        ">tollgate pace 2K,1.1: 2 threads",
        ">Rate per interval</text>",
        ">Backlog at the end of each interval: schedule time due and not taken</text>",
        ">backlog (",
        ">rate (ops/s)</text>",
        ">achieved</text>",
        ">target</text>",
        ">backlog</text>",
        ">p50</text>",
        ">p99</text>",
        ">max</text>",
        ">time since start (s)</text>",
        ">0</text>",
    ] {
        assert!(svg.contains(text), "{text} in {svg}");
    }
    // Three charts with a polyline per series: achieved, target, backlog,
    // max, p99, p50.
    assert_eq!(svg.matches("<polyline").count(), 6);
}

#[test]
fn pace_plot_is_refused_with_idle() {
    let o = tollgate(&["pace", "--idle", "--plot", "x.svg"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn pace_says_what_it_runs_before_it_runs() {
    let o = tollgate(&["pace", "2K", "--duration", "300ms", "--interval", "100ms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "tollgate pace 2K,1.1: 2 threads for 300ms, a line every 100ms"
    );
    // People's units: no bare nanosecond counts in the summary.
    let cpu = lines.iter().find(|l| l.starts_with("  cpu ")).unwrap();
    assert!(cpu.ends_with("s per op"), "{cpu}");
    assert!(!cpu.contains(" ns per op"), "{cpu}");
    let late = lines.iter().find(|l| l.starts_with("  lateness ")).unwrap();
    assert!(late.contains("ops the callers reported"), "{late}");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("  limiter     mean wait ")));

    // CSV: the start as a comment, then columns named as the text names them.
    let o = tollgate(&[
        "pace",
        "2K",
        "--duration",
        "200ms",
        "--interval",
        "100ms",
        "--format",
        "csv",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let mut lines = out.lines();
    assert!(lines.next().unwrap().starts_with("# start duration_s=0.2 "));
    assert_eq!(
        lines.next().unwrap(),
        "elapsed_s,target_ops_per_s,achieved_ops_per_s,ratio,ops,backlog_ns,\
         lateness_p50_ns,lateness_p99_ns,lateness_max_ns,lateness_mean_ns,stalled"
    );
}

#[test]
fn pace_refuses_a_plot_it_cannot_write_before_the_run() {
    // A ten-minute run: it must end at once, with nothing run (the hang
    // guard would fail the test long before the run's end).
    let o = tollgate(&[
        "pace",
        "1K",
        "--duration",
        "10m",
        "--plot",
        "/nonexistent/dir/pace.svg",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        err.starts_with("error: cannot write the picture to /nonexistent/dir/pace.svg: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A small fleet: a root and two datacenters, four clients each.
const FLEET: &str = r#"
name: small
duration: 130
levels:
  - name: root
    config: {resources: [{identifier_glob: "*", capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}}]}
  - name: dc
    jobs: 2
    config: {resources: [{identifier_glob: "*", capacity: 0, algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}}]}
clients: {per_leaf: 4, wants: 10}
timeline:
  - {at: 60, capacity: 40}
"#;

#[test]
fn simulate_runs_a_fleet_file_and_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("small.yaml");
    std::fs::write(&fleet, FLEET).unwrap();
    let out = dir.path().join("out");
    let o = tollgate(&[
        "simulate",
        "--fleet",
        fleet.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Progress on stderr, the summary on stdout.
    assert!(
        stderr(&o).contains("simulated 130 of 130 s"),
        "{}",
        stderr(&o)
    );
    // Cutting the capacity leaves the leases granted before the cut
    // running: the root has handed out more than it holds until the
    // datacenters refresh.
    for line in [
        "small (seed 1): 130 s; handed out 102.82% of the available capacity (102.82% counting \
         root outages); 2 samples over capacity (max 200.00%)",
        "level dc: 3 RPCs/s on average, 16 in the busiest second",
        "8 overshoots; first at 60 s: root handed out 80.000 of 40.000 \
         (after 60 s: root capacity set to 40)",
        "    60 s  root capacity set to 40: converged after 2 s; below 99% for 0 s",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let csv = std::fs::read_to_string(out.join("small-seed-1.csv")).unwrap();
    assert!(csv.starts_with(
        "t,capacity,total_wants,total_has,without_lease,root_available,root_handed_out,\
         root_rpcs,dc_available,dc_handed_out,dc_rpcs\n"
    ));
    assert_eq!(csv.lines().count(), 132);
    let svg = std::fs::read_to_string(out.join("small-seed-1.svg")).unwrap();
    assert!(svg.contains(">Level dc: handed out against what its masters hold</text>"));
}

#[test]
fn a_malformed_fleet_file_gets_one_line_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("bad.yaml");
    std::fs::write(
        &fleet,
        FLEET.replace("capacity: 40", "partition: {job: dc5, for: 9}"),
    )
    .unwrap();
    let o = tollgate(&["simulate", "--fleet", fleet.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "error: {}: timeline[0].partition.job: no job \"dc5\" in the tree",
            fleet.display()
        )
    );
}

#[test]
fn simulate_help_lists_the_seven_scenarios() {
    let o = tollgate(&["simulate", "--help"]);
    assert!(o.status.success());
    let help = String::from_utf8(o.stdout).unwrap();
    for n in 1..=7 {
        let line = help
            .lines()
            .find(|l| l.starts_with(&format!("  {n}  ")))
            .unwrap_or_else(|| panic!("scenario {n} in {help}"));
        assert!(line.len() > 20, "{line}");
    }
    assert!(!help.contains("see `tollgate_doorman::simulate`"), "{help}");
}

/// Ten thousand tasks at 100K ops/s: each fill serves one task a burst of
/// ops, after which it waits behind all the others, past the end of the
/// run. The ops of tasks still waiting are reported all the same, so the
/// lateness figures cover the run (not a hundredth of it).
#[test]
fn pace_reports_the_ops_of_tasks_waiting_at_the_end() {
    let o = tollgate(&[
        "pace",
        "100K",
        "--async",
        "--threads",
        "10000",
        "--duration",
        "1s",
        "--interval",
        "250ms",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let summary: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let run = summary["total_ops"].as_u64().unwrap();
    let reported = summary["lateness_ops"].as_u64().unwrap();
    assert!(run > 0, "{summary}");
    assert!(
        reported * 2 >= run,
        "{reported} of {run} reported: {summary}"
    );
}
