//! `tollgate lease`: asks for capacity and prints each lease as it
//! refreshes, a Doorman shell.

use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tollgate_doorman::{Capacity, CapacitySource, Client, ExpiryMode, ResourceOptions};

use crate::cli;

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Examples:\n  tollgate lease api --wants 20 --server 127.0.0.1:15000\n  \
    tollgate lease a b --count 4 --timeout 2s --server 10.0.0.1:15000 --server 10.0.0.2:15000\n  \
    tollgate lease api --server doorman.example:15000 --tls-ca ca.pem\n  \
    tollgate lease api --server doorman.example:15000 --tls-ca ca.pem --tls-cert me.pem --tls-key me.key\n  \
    tollgate lease api --format json --count 1\n\n\
    SIGINT (Ctrl-C) and SIGTERM release the leases before exiting; a second one exits at once.\n\n\
    Go Doorman's client flags are read too: -server, -resource, -wants, -client_id (--id), \
    -ca_file (--tls-ca).\n\n\
    A server in learning mode (after it becomes master, for its learning_mode_duration, by \
    default one lease length) grants a client only what it already holds, so a new client \
    is granted 0 until learning mode ends: lease says so on stderr.\n\n\
    A failure no retry can mend (not a Doorman server, an id or a request the server refuses, \
    a certificate refused) ends the command at once with its cause; other failures are retried \
    until --timeout, and the last one is named. Any number of resources may be asked for: \
    the client splits its requests into ones the server accepts (1000 resources, 64 KiB).")]
pub(crate) struct Args {
    /// Resource ids to ask for.
    #[arg(required = true)]
    resources: Vec<String>,
    /// Capacity wanted, for every resource.
    #[arg(long, default_value_t = 1.0)]
    wants: f64,
    /// Priority sent with every request.
    #[arg(long, default_value_t = 0)]
    priority: i64,
    /// Server address (`host:port`); repeat, or separate with commas, for
    /// failover.
    #[arg(
        long = "server",
        default_value = "127.0.0.1:15000",
        value_delimiter = ','
    )]
    servers: Vec<String>,
    /// What to enforce while no lease is valid: optimistic, pessimistic or
    /// safe.
    #[arg(long, default_value = "safe")]
    mode: ExpiryMode,
    /// Client id (default host:pid:n).
    #[arg(long)]
    id: Option<String>,
    /// Stop after this many updates in all (default: run until Ctrl-C or
    /// SIGTERM), releasing the leases.
    #[arg(long, value_parser = cli::positive::<u64>)]
    count: Option<u64>,
    /// Each RPC's deadline, and how long to wait for the server's first
    /// answer before giving up with an error.
    #[arg(long, default_value = "5s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    timeout: Duration,
    /// Output: a line of text per update (numbers rounded for people), or
    /// one JSON object a line (numbers in full).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    tls: cli::ClientTlsArgs,
}

/// What a resource's watcher tells the command.
enum Update {
    /// A line to print.
    Line(String),
    /// The client stopped on a failure no retry can mend.
    Stopped,
}

/// How `lease` prints updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// `resource capacity=... source=... ...`, numbers rounded.
    Text,
    /// One JSON object per update, numbers in full precision.
    Json,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(lease(args))
}

/// Seconds from now until `expiry` (Unix time), and the refresh interval,
/// of the last lease.
fn lease_times(c: &Capacity) -> Option<(i64, u64)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    c.lease.map(|l| {
        (
            l.expiry.as_secs() as i64 - now.as_secs() as i64,
            l.refresh_interval.as_secs(),
        )
    })
}

/// One update: `resource capacity source expires_in refresh`, or its JSON
/// object.
fn line(format: Format, id: &str, c: &Capacity) -> String {
    let times = lease_times(c);
    match format {
        Format::Text => {
            let (expires, refresh) = match times {
                Some((expires, refresh)) => (format!("{expires}s"), format!("{refresh}s")),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let safe = c.safe_capacity.map_or("-".to_owned(), rounded);
            format!(
                "{id} capacity={} source={} expires_in={expires} refresh={refresh} safe={safe} refreshes={}",
                rounded(c.capacity),
                c.source,
                c.refreshes
            )
        }
        Format::Json => serde_json::json!({
            "resource": id,
            "capacity": c.capacity,
            "source": c.source.to_string(),
            "expires_in_s": times.map(|t| t.0),
            "refresh_s": times.map(|t| t.1),
            "safe": c.safe_capacity,
            "refreshes": c.refreshes,
        })
        .to_string(),
    }
}

/// A capacity for people: whole numbers as they are, others to three
/// decimals (four significant digits below 1), trailing zeros dropped:
/// `3333.333`, `0.0005`.
fn rounded(x: f64) -> String {
    if x == x.trunc() || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (3 - magnitude.min(0)).clamp(3, 15) as usize;
    let text = format!("{x:.decimals$}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// What to say when a lease grants nothing although the client wants
/// some: the protocol does not tell a learning server apart, so name what
/// leads to it and for how long learning mode lasts by default.
fn granted_nothing(id: &str, wants: f64, c: &Capacity) -> Option<String> {
    if c.source != CapacitySource::Lease || c.capacity != 0.0 || wants <= 0.0 {
        return None;
    }
    let length = lease_times(c).map_or(String::new(), |(expires, _)| {
        format!(", here {}s", expires.max(0))
    });
    Some(format!(
        "{id}: granted 0 of {} wanted: a server in learning mode grants a client only what it \
         already holds, for its learning_mode_duration after it becomes master (by default one \
         lease length{length}), so a new client gets 0 until learning mode ends; a server with \
         all its capacity handed out grants 0 too (its /debug/status says which)",
        rounded(wants)
    ))
}

async fn lease(args: Args) -> anyhow::Result<()> {
    // One listener per signal for the whole run, installed first: a fresh
    // `ctrl_c()` per loop turn would miss a signal that arrives between
    // turns. SIGINT and SIGTERM both release the leases.
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let timeout = args.timeout;
    let servers = args.servers.join(", ");
    let mut builder = Client::builder().servers(args.servers).rpc_timeout(timeout);
    if let Some(tls) = args.tls.tls() {
        builder = builder.tls(&tls)?;
    }
    if let Some(id) = args.id {
        builder = builder.id(id);
    }
    let client = builder.build()?;
    eprintln!("client id {}", client.id());
    let options = ResourceOptions::new(args.wants)
        .priority(args.priority)
        .mode(args.mode);
    let mut resources = Vec::new();
    for id in &args.resources {
        resources.push(client.resource(id.clone(), options)?);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (format, wants) = (args.format, args.wants);
    for r in &resources {
        let id = r.id().to_owned();
        let mut w: watch::Receiver<Capacity> = r.watch();
        let tx = tx.clone();
        let client = client.clone();
        tokio::spawn(async move {
            // Said once while the grants stay 0, again after one that was not.
            let mut told = false;
            while w.changed().await.is_ok() {
                if client.error().is_some() {
                    let _ = tx.send(Update::Stopped);
                    break;
                }
                let c = w.borrow_and_update().clone();
                match granted_nothing(&id, wants, &c) {
                    Some(note) if !told => {
                        eprintln!("note: {note}");
                        told = true;
                    }
                    Some(_) => {}
                    None => told &= c.source != CapacitySource::Lease,
                }
                if tx.send(Update::Line(line(format, &id, &c))).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut printed = 0u64;
    // Until the first answer, --timeout bounds the whole wait: a server
    // that is down or unreachable ends the command with an error.
    let first_answer = tokio::time::sleep(timeout);
    tokio::pin!(first_answer);
    let mut gave_up = false;
    loop {
        tokio::select! {
            () = &mut first_answer, if printed == 0 => {
                gave_up = true;
                break;
            }
            l = rx.recv() => match l {
                Some(Update::Stopped) => break,
                Some(Update::Line(l)) => {
                    println!("{l}");
                    printed += 1;
                    if args.count.is_some_and(|n| printed >= n) {
                        break;
                    }
                }
                None => break,
            },
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    let stopped = client.error();
    if gave_up {
        let last = client
            .last_error()
            .map_or(String::new(), |e| format!(" (the last try: {e})"));
        anyhow::bail!(
            "no answer from {servers} within {}{last}: is the server running and reachable?",
            humantime::format_duration(timeout)
        );
    }
    // A stopped client releases only what some request of its was
    // granted before another failed.
    let held = resources.iter().any(|r| r.current().lease.is_some());
    if stopped.is_some() && !held {
        drop(resources);
    } else {
        release(resources, timeout, &mut interrupt, &mut terminate).await;
    }
    match stopped {
        Some(e) => Err(anyhow::anyhow!("{e}")),
        None => Ok(()),
    }
}

/// Releases every resource at once, for at most one RPC deadline (and a
/// second to spare); a second signal exits without waiting.
async fn release(
    resources: Vec<tollgate_doorman::Resource>,
    timeout: Duration,
    interrupt: &mut tokio::signal::unix::Signal,
    terminate: &mut tokio::signal::unix::Signal,
) {
    let mut releases = tokio::task::JoinSet::new();
    for r in resources {
        releases.spawn(r.release());
    }
    let drain = async {
        while let Some(done) = releases.join_next().await {
            if let Ok(Err(e)) = done {
                eprintln!("{e}");
            }
        }
    };
    tokio::select! {
        r = tokio::time::timeout(timeout + Duration::from_secs(1), drain) => {
            if r.is_err() {
                eprintln!("release not acknowledged within {timeout:?}; exiting");
            }
        }
        _ = interrupt.recv() => eprintln!("interrupted again: exiting without releasing"),
        _ = terminate.recv() => eprintln!("terminated again: exiting without releasing"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_are_rounded_for_people() {
        assert_eq!(rounded(42.0), "42");
        assert_eq!(rounded(0.0), "0");
        assert_eq!(rounded(10_000.0 / 3.0), "3333.333");
        assert_eq!(rounded(2.5), "2.5");
        assert_eq!(rounded(0.000_512_345), "0.0005123");
        assert_eq!(rounded(1e15), "1000000000000000");
    }

    #[test]
    fn text_rounds_and_json_keeps_full_precision() {
        let c = Capacity {
            capacity: 10_000.0 / 3.0,
            source: CapacitySource::Pending,
            lease: None,
            safe_capacity: Some(10_000.0 / 3.0),
            refreshes: 0,
        };
        assert_eq!(
            line(Format::Text, "api", &c),
            "api capacity=3333.333 source=pending expires_in=- refresh=- safe=3333.333 refreshes=0"
        );
        let json: serde_json::Value = serde_json::from_str(&line(Format::Json, "api", &c)).unwrap();
        assert_eq!(json["capacity"].as_f64(), Some(10_000.0 / 3.0));
        assert_eq!(json["safe"].as_f64(), Some(10_000.0 / 3.0));
        assert_eq!(json["source"], "pending");
        assert!(json["expires_in_s"].is_null());
    }
}
