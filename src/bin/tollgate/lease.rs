//! `tollgate lease`: asks for capacity and prints each lease as it
//! refreshes, a Doorman shell.

use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tollgate::doorman::{Capacity, Client, ExpiryMode, ResourceOptions};

use crate::cli;

#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms or 1m30s.\n\n\
    Examples:\n  tollgate lease api --wants 20 --server 127.0.0.1:15000\n  \
    tollgate lease a b --count 4 --timeout 2s --server 10.0.0.1:15000 --server 10.0.0.2:15000\n  \
    tollgate lease api --server doorman.example:15000 --tls-ca ca.pem\n  \
    tollgate lease api --server doorman.example:15000 --tls-ca ca.pem --tls-cert me.pem --tls-key me.key")]
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
    /// Server address (`host:port`); repeat for failover.
    #[arg(long = "server", default_value = "127.0.0.1:15000")]
    servers: Vec<String>,
    /// What to enforce while no lease is valid: optimistic, pessimistic or
    /// safe.
    #[arg(long, default_value = "safe")]
    mode: ExpiryMode,
    /// Client id (default host:pid:n).
    #[arg(long)]
    id: Option<String>,
    /// Stop after this many updates in all (default: run until Ctrl-C),
    /// releasing the leases.
    #[arg(long, value_parser = cli::positive::<u64>)]
    count: Option<u64>,
    /// Each RPC's deadline, and how long to wait for the server's first
    /// answer before giving up with an error.
    #[arg(long, default_value = "5s", value_parser = cli::positive_duration, allow_hyphen_values = true)]
    timeout: Duration,
    #[command(flatten)]
    tls: cli::ClientTlsArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(lease(args))
}

/// One line per update: `resource capacity source expires_in refresh`.
fn line(id: &str, c: &Capacity) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (expires, refresh) = match c.lease {
        Some(l) => (
            format!("{}s", l.expiry.as_secs() as i64 - now.as_secs() as i64),
            format!("{}s", l.refresh_interval.as_secs()),
        ),
        None => ("-".to_owned(), "-".to_owned()),
    };
    let safe = c.safe_capacity.map_or("-".to_owned(), |s| s.to_string());
    format!(
        "{id} capacity={} source={} expires_in={expires} refresh={refresh} safe={safe} refreshes={}",
        c.capacity, c.source, c.refreshes
    )
}

async fn lease(args: Args) -> anyhow::Result<()> {
    // One listener for the whole run, installed first: a fresh
    // `ctrl_c()` per loop turn would miss a SIGINT that arrives between
    // turns.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the SIGINT handler")?;
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
    for r in &resources {
        let id = r.id().to_owned();
        let mut w: watch::Receiver<Capacity> = r.watch();
        let tx = tx.clone();
        tokio::spawn(async move {
            while w.changed().await.is_ok() {
                let c = w.borrow_and_update().clone();
                if tx.send(line(&id, &c)).is_err() {
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
                Some(l) => {
                    println!("{l}");
                    printed += 1;
                    if args.count.is_some_and(|n| printed >= n) {
                        break;
                    }
                }
                None => break,
            },
            _ = interrupt.recv() => break,
        }
    }
    anyhow::ensure!(
        !gave_up,
        "no answer from {servers} within {}: is the server running and reachable? \
         (the warnings above give each failed try)",
        humantime::format_duration(timeout)
    );
    // Release everything at once, for at most one RPC deadline (and a
    // second to spare); a second Ctrl-C exits without waiting.
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
    }
    Ok(())
}
