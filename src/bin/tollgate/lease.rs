//! `tollgate lease`: asks for capacity and prints each lease as it
//! refreshes, a Doorman shell.

use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tollgate::doorman::client::{Capacity, Client, ExpiryMode, ResourceOptions};

#[derive(Debug, clap::Args)]
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
    #[arg(long)]
    count: Option<u64>,
    /// RPC deadline, in seconds.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
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
    let timeout = Duration::try_from_secs_f64(args.timeout).context("--timeout")?;
    let mut builder = Client::builder().servers(args.servers).rpc_timeout(timeout);
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
    loop {
        tokio::select! {
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
