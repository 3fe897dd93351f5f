//! `tollgate load` as a process: a run in which nothing succeeds is an
//! error, a bad `--server-pid` is found before the run, and a server that
//! never answers cannot stretch the run past its `--duration`.

use std::process::Output;

use tollgate_testkit::process as cli;

fn load(args: &[&str]) -> Output {
    let mut child = cli::tollgate()
        .arg("load")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < cli::HANG, "load {args:?} did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Allow calls against a lease server: every call fails, and the run says
/// so and exits 1.
#[test]
fn a_run_where_every_call_fails_exits_non_zero() {
    let mut server = cli::start(&mut cli::on_free_ports("serve"));
    let addr = server.logged_addr("gRPC listening");
    let o = load(&["--mode", "allow", "--server", &addr, "--duration", "200ms"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: every call failed ("), "{err}");
    assert!(
        last.contains("unknown method /quotaservice.QuotaService/Allow"),
        "{err}"
    );
}

#[test]
fn a_server_pid_that_names_no_process_is_refused_before_the_run() {
    let nowhere = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let o = load(&["--server", &nowhere, "--server-pid", "999999999"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: --server-pid 999999999: cannot read the process's CPU time"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A listener that takes connections and never answers: each call is
/// abandoned at the deadline, and no answer at all is an error.
#[test]
fn a_server_that_never_answers_ends_the_run_at_its_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let o = load(&[
        "--mode",
        "allow",
        "--server",
        &addr,
        "--duration",
        "300ms",
        "--concurrency",
        "8",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("allows=0 "), "{out}");
    assert!(out.contains(" abandoned=8 "), "{out}");
    assert!(
        err.contains("error: no call was answered within --duration 300ms (8 abandoned)"),
        "{err}"
    );
}
