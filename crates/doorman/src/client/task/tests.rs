//! The loop against a scripted transport on paused tokio time: expiry on
//! time while a call hangs, huge server values, and a panicking loop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::Timestamp;
use crate::pb;
use crate::transport::{Call, Transport};
use crate::WallClock;
use crate::{CapacitySource, Client, ExpiryMode, ResourceOptions};

/// Unix time at the start of a test.
const T0: u64 = 1_000_000;

/// Unix time on tokio's (paused) clock.
#[derive(Debug)]
struct TokioClock {
    origin: Instant,
}

impl WallClock for TokioClock {
    fn now(&self) -> Timestamp {
        Duration::from_secs(T0) + self.origin.elapsed()
    }
}

/// What the scripted server does with one GetCapacity.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Grants `capacity` until `expiry_time`, refresh every `refresh` s.
    Grant {
        capacity: f64,
        expiry_time: i64,
        refresh: i64,
    },
    /// Accepts the call and never answers.
    Silent,
    /// Panics while the call is being made.
    Panic,
}

/// Plays `steps` in order, then the last one forever.
#[derive(Debug)]
struct Scripted {
    steps: Vec<Step>,
    calls: AtomicUsize,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps,
            calls: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Transport for Scripted {
    fn discovery(&self, _: &str) -> Call<pb::DiscoveryResponse> {
        Box::pin(async {
            Ok(pb::DiscoveryResponse {
                mastership: pb::Mastership::default(),
                is_master: true,
            })
        })
    }

    fn get_capacity(
        &self,
        _: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let step = self.steps[n.min(self.steps.len() - 1)];
        match step {
            Step::Grant {
                capacity,
                expiry_time,
                refresh,
            } => {
                let response = request
                    .resource
                    .iter()
                    .map(|r| pb::ResourceResponse {
                        resource_id: r.resource_id.clone(),
                        gets: pb::Lease {
                            expiry_time,
                            refresh_interval: refresh,
                            capacity,
                        },
                        safe_capacity: None,
                    })
                    .collect();
                Box::pin(async move {
                    Ok(pb::GetCapacityResponse {
                        response,
                        mastership: None,
                    })
                })
            }
            Step::Silent => Box::pin(std::future::pending()),
            Step::Panic => panic!("scripted transport panics"),
        }
    }

    fn get_server_capacity(
        &self,
        _: &str,
        _: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        Box::pin(std::future::pending())
    }

    fn release_capacity(
        &self,
        _: &str,
        _: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        Box::pin(async { Ok(pb::ReleaseCapacityResponse::default()) })
    }

    fn forget(&self, _: &str) {}
}

/// A guard against hanging; never part of what is asserted.
const HANG: Duration = Duration::from_secs(3_600);

fn client(transport: Arc<Scripted>, rpc_timeout: Duration) -> Client {
    Client::builder()
        .server("a:1")
        .rpc_timeout(rpc_timeout)
        .clock(Arc::new(TokioClock {
            origin: Instant::now(),
        }))
        .transport(transport)
        .seed(1)
        .build()
        .unwrap()
}

async fn wait_source(r: &crate::Resource, source: CapacitySource) {
    let mut watch = r.watch();
    tokio::time::timeout(HANG, watch.wait_for(|c| c.source == source))
        .await
        .expect("hung waiting for the source")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_mode_applies_at_expiry_while_a_refresh_hangs() {
    // A 10 s lease, refreshed every 3 s; the refresh at 3 s goes to a
    // server that never answers, with a 30 s RPC deadline.
    let transport = Scripted::new(vec![
        Step::Grant {
            capacity: 10.0,
            expiry_time: (T0 + 10) as i64,
            refresh: 3,
        },
        Step::Silent,
    ]);
    let start = Instant::now();
    let client = client(transport.clone(), Duration::from_secs(30));
    let r = client
        .resource(
            "res",
            ResourceOptions::new(10.0).mode(ExpiryMode::Pessimistic),
        )
        .unwrap();
    wait_source(&r, CapacitySource::Lease).await;
    assert_eq!(r.capacity(), 10.0);
    wait_source(&r, CapacitySource::Expired).await;
    let late = start.elapsed() - Duration::from_secs(10);
    assert!(
        late <= Duration::from_millis(100),
        "expired {late:?} after the expiry instant"
    );
    assert_eq!(r.capacity(), 0.0);
    // The refresh was in flight all along.
    assert_eq!(transport.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn huge_expiry_and_refresh_values_do_not_stop_the_client() {
    let transport = Scripted::new(vec![Step::Grant {
        capacity: 5.0,
        expiry_time: i64::MAX,
        refresh: i64::MAX,
    }]);
    let client = client(transport.clone(), Duration::from_secs(5));
    let first = client.resource("a", ResourceOptions::new(5.0)).unwrap();
    wait_source(&first, CapacitySource::Lease).await;
    // The task is alive: a new resource is asked for and granted.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let second = client.resource("b", ResourceOptions::new(5.0)).unwrap();
    wait_source(&second, CapacitySource::Lease).await;
    assert_eq!(second.capacity(), 5.0);
    assert_eq!(transport.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_loop_is_restarted() {
    let transport = Scripted::new(vec![
        Step::Panic,
        Step::Grant {
            capacity: 7.0,
            expiry_time: (T0 + 60) as i64,
            refresh: 30,
        },
    ]);
    let start = Instant::now();
    let client = client(transport.clone(), Duration::from_secs(5));
    let r = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    wait_source(&r, CapacitySource::Lease).await;
    assert_eq!(r.capacity(), 7.0);
    assert_eq!(transport.calls(), 2);
    assert_eq!(start.elapsed(), super::RESTART_DELAY);
}

#[test]
fn a_failed_rpc_is_described_in_one_line() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let mut status = tonic::Status::unavailable("tcp connect error");
    status.set_source(Arc::new(io));
    assert_eq!(
        crate::session::describe(&status),
        "Unavailable: tcp connect error: refused"
    );
    assert_eq!(
        crate::session::describe(&tonic::Status::internal("")),
        "Internal"
    );
}
