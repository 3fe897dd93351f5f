//! A service that keeps to a leased rate, end to end in one process.
//!
//! Starts a capacity server that shares 100 requests/s between its clients
//! (FAIR_SHARE), then two lease clients that each want 80/s, so each is
//! granted 50/s. Each puts a [`LeaseLayer`] around a trivial service and
//! drives it from four concurrent callers for a few seconds; requests that
//! find no slot within 10 ms are rejected. Prints what each was granted and how
//! many requests per second it admitted, and the clients' RPC counts
//! (their Prometheus metrics).
//!
//! ```text
//! cargo run --release --example leased_service [seconds]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_doorman::{
    CapacitySource, Client, ClientMetrics, LeaseLayer, RateOptions, RateResource, Rejected,
    ResourceOptions,
};
use tollgate_doorman::{Server, ServerConfig, SingleElection};
use tower::{Layer as _, Service as _, ServiceExt as _};

const CONFIG: &str = r#"
resources:
  - identifier_glob: api
    capacity: 100
    safe_capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: "*"
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 15}
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5);

    // The server, on an ephemeral port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let election = SingleElection::new(Some(addr.clone()));
    let server = Server::builder(ServerConfig::from_yaml(CONFIG)?)
        .election(&election)
        .build();
    tokio::spawn(server.clone().serve(listener, std::future::pending()));

    // Two clients of the same resource, each with a layered service, and
    // one set of metrics for both.
    let metrics = ClientMetrics::new();
    let mut runs = Vec::new();
    for name in ["first", "second"] {
        let client = Client::builder()
            .server(addr.clone())
            .metrics(metrics.clone())
            .build()?;
        let rate = Arc::new(RateResource::new(
            &client,
            "api",
            RateOptions::new(ResourceOptions::new(80.0)),
        )?);
        // Wait until both leases are in (the second client's grant makes
        // the first shrink at its next refresh).
        let mut rx = rate.resource().watch();
        rx.wait_for(|c| c.source == CapacitySource::Lease).await?;
        runs.push((name, client, rate));
    }
    for (_, _, rate) in &runs {
        let mut rx = rate.resource().watch();
        rx.wait_for(|c| c.capacity == 50.0).await?;
    }

    // Four concurrent callers per client: more than the lease allows, so
    // some requests find no slot within 10 ms and are rejected.
    let mut tasks = Vec::new();
    for (name, _client, rate) in &runs {
        let layer = LeaseLayer::new(rate.clone(), Duration::from_millis(10));
        let service = layer.layer(tower::service_fn(|n: u64| async move {
            Ok::<_, tower::BoxError>(n)
        }));
        let name = *name;
        let granted = rate.capacity();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let mut service = service.clone();
                tokio::spawn(async move {
                    let start = Instant::now();
                    let (mut ok, mut rejected) = (0u64, 0u64);
                    while start.elapsed() < Duration::from_secs(seconds) {
                        match service.ready().await?.call(ok).await {
                            Ok(_) => ok += 1,
                            Err(e) if e.is::<Rejected>() => rejected += 1,
                            Err(e) => return Err(e),
                        }
                    }
                    Ok::<_, tower::BoxError>((ok, rejected, start.elapsed()))
                })
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut rejected, mut secs) = (0, 0, 0.0f64);
            for w in workers {
                let (o, r, d) = w.await.map_err(|e| e.to_string())??;
                ok += o;
                rejected += r;
                secs = secs.max(d.as_secs_f64());
            }
            println!(
                "{name}: granted {granted}/s, admitted {ok} in {secs:.2} s = {:.1}/s, rejected {rejected}",
                ok as f64 / secs
            );
            Ok::<_, tower::BoxError>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    for r in server.status() {
        println!(
            "server: {} capacity {} handed out {} to {} clients",
            r.id, r.capacity, r.sum_has, r.clients
        );
    }
    for line in metrics.encode().lines() {
        if line.starts_with("doorman_client_request") && !line.contains("_bucket") {
            println!("clients: {line}");
        }
    }
    Ok(())
}
