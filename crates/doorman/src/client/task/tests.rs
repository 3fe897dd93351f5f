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
    /// Answers with this error status.
    Fail(tonic::Code),
}

/// Plays `steps` in order, then the last one forever.
#[derive(Debug)]
struct Scripted {
    steps: Vec<Step>,
    calls: AtomicUsize,
    /// Each GetCapacity's resource count and encoded size, in order.
    sizes: std::sync::Mutex<Vec<(usize, usize)>>,
    /// Each ReleaseCapacity's id count and encoded size, in order.
    releases: std::sync::Mutex<Vec<(usize, usize)>>,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps,
            calls: AtomicUsize::new(0),
            sizes: std::sync::Mutex::new(Vec::new()),
            releases: std::sync::Mutex::new(Vec::new()),
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
        self.sizes.lock().unwrap().push((
            request.resource.len(),
            prost::Message::encoded_len(&request),
        ));
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
            Step::Fail(code) => {
                Box::pin(async move { Err(tonic::Status::new(code, "scripted failure")) })
            }
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
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        self.releases.lock().unwrap().push((
            request.resource_id.len(),
            prost::Message::encoded_len(&request),
        ));
        Box::pin(async { Ok(pb::ReleaseCapacityResponse::default()) })
    }

    fn forget(&self, _: &str) {}
}

/// A guard against hanging; never part of what is asserted.
const HANG: Duration = Duration::from_secs(3_600);

fn client(transport: Arc<Scripted>, rpc_timeout: Duration) -> Client {
    builder(transport, rpc_timeout).build().unwrap()
}

fn builder(transport: Arc<Scripted>, rpc_timeout: Duration) -> crate::ClientBuilder {
    Client::builder()
        .server("a:1")
        .rpc_timeout(rpc_timeout)
        .clock(Arc::new(TokioClock {
            origin: Instant::now(),
        }))
        .transport(transport)
        .seed(1)
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

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_stops_the_client_at_once_and_wakes_its_watchers() {
    let transport = Scripted::new(vec![Step::Fail(tonic::Code::Unimplemented)]);
    let client = client(transport.clone(), Duration::from_secs(5));
    let r = client
        .resource("a", ResourceOptions::new(7.0).mode(ExpiryMode::Optimistic))
        .unwrap();
    let mut watch = r.watch();
    tokio::time::timeout(HANG, watch.changed())
        .await
        .expect("hung waiting for the stop")
        .unwrap();
    let error = r.error().expect("stopped");
    assert!(error.is_permanent());
    assert_eq!(
        error.to_string(),
        "a:1: Unimplemented: scripted failure: the server does not serve Doorman's Capacity API"
    );
    assert_eq!(client.last_error(), Some(error));
    // The capacity is the mode's, and no retry follows, even an hour on
    // or for a new resource.
    assert_eq!(r.current().source, CapacitySource::Pending);
    assert_eq!(r.capacity(), 7.0);
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    let _b = client.resource("b", ResourceOptions::new(1.0)).unwrap();
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert_eq!(transport.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_tried_at_every_configured_server_before_stopping() {
    let transport = Scripted::new(vec![Step::Fail(tonic::Code::InvalidArgument)]);
    let start = Instant::now();
    let client = builder(transport.clone(), Duration::from_secs(5))
        .server("b:1")
        .server("c:1")
        .build()
        .unwrap();
    let r = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    tokio::time::timeout(HANG, r.watch().changed())
        .await
        .unwrap()
        .unwrap();
    assert!(client.error().is_some());
    // One call per server, with no backoff between them.
    assert_eq!(transport.calls(), 3);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_passing_failure_is_retried_and_forgotten_after_a_success() {
    let transport = Scripted::new(vec![
        Step::Fail(tonic::Code::Unavailable),
        Step::Grant {
            capacity: 7.0,
            expiry_time: (T0 + 60) as i64,
            refresh: 30,
        },
    ]);
    let client = client(transport.clone(), Duration::from_secs(5));
    let r = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    let mut watch = r.watch();
    tokio::time::timeout(HANG, watch.wait_for(|c| c.source == CapacitySource::Lease))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transport.calls(), 2);
    assert_eq!(client.error(), None);
    assert_eq!(client.last_error(), None);
}

#[tokio::test(start_paused = true)]
async fn the_last_error_is_published_on_every_failed_round_until_one_succeeds() {
    let transport = Scripted::new(vec![
        Step::Fail(tonic::Code::Unavailable),
        Step::Fail(tonic::Code::Unavailable),
        Step::Grant {
            capacity: 7.0,
            expiry_time: (T0 + 60) as i64,
            refresh: 30,
        },
    ]);
    let client = client(transport.clone(), Duration::from_secs(5));
    assert_eq!(client.last_error(), None, "no round yet");
    let mut errors = client.watch_last_error();
    let r = client.resource("a", ResourceOptions::new(7.0)).unwrap();

    let first = tokio::time::timeout(HANG, errors.wait_for(Option::is_some))
        .await
        .unwrap()
        .unwrap()
        .clone()
        .unwrap();
    let crate::SessionError::Rpc { address, status } = &first else {
        panic!("not an RPC error: {first:?}");
    };
    assert_eq!(
        (address.as_str(), status.code()),
        ("a:1", tonic::Code::Unavailable)
    );
    assert_eq!(client.last_error(), Some(first.clone()));
    assert_eq!(client.error(), None, "retried, not stopped");

    // The second failure notifies again, though it is the same error.
    errors.borrow_and_update();
    tokio::time::timeout(HANG, errors.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transport.calls(), 2);
    assert_eq!(*errors.borrow_and_update(), Some(first));

    // The third round is granted: the error is cleared, with a notice.
    tokio::time::timeout(HANG, errors.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*errors.borrow_and_update(), None);
    assert_eq!(client.last_error(), None);
    assert_eq!(r.current().source, CapacitySource::Lease);
    assert_eq!(r.capacity(), 7.0);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_for_good_at_one_of_several_servers_is_a_detour() {
    // The first server is of another kind; the next one grants at once.
    let transport = Scripted::new(vec![
        Step::Fail(tonic::Code::Unimplemented),
        Step::Grant {
            capacity: 7.0,
            expiry_time: (T0 + 60) as i64,
            refresh: 30,
        },
    ]);
    let client = builder(transport.clone(), Duration::from_secs(5))
        .server("b:1")
        .build()
        .unwrap();
    let r = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    wait_source(&r, CapacitySource::Lease).await;
    assert_eq!(transport.calls(), 2);
    assert_eq!(client.error(), None);
    assert_eq!(client.last_error(), None);
}

#[tokio::test(start_paused = true)]
async fn the_round_that_stops_the_client_notifies_with_the_client_stopped() {
    let transport = Scripted::new(vec![Step::Fail(tonic::Code::InvalidArgument)]);
    let client = builder(transport.clone(), Duration::from_secs(5))
        .server("b:1")
        .build()
        .unwrap();
    let mut errors = client.watch_last_error();
    let _r = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    // The receiver keeps the latest value: the refusal by a:1 is followed
    // at once by b:1's, which stops the client.
    tokio::time::timeout(HANG, errors.changed())
        .await
        .unwrap()
        .unwrap();
    let stop = errors.borrow_and_update().clone().expect("a failure");
    assert_eq!(stop.address(), Some("b:1"));
    assert_eq!(client.error(), Some(stop), "stopped before the notice");
    assert_eq!(transport.calls(), 2);
    assert_eq!(client.last_error(), client.error());
}

#[tokio::test(start_paused = true)]
async fn an_answer_clears_the_last_error_before_its_capacity_is_published() {
    // One resource a request: the second round's first request is granted,
    // its second hangs.
    let transport = Scripted::new(vec![
        Step::Fail(tonic::Code::Unavailable),
        Step::Grant {
            capacity: 7.0,
            expiry_time: (T0 + 60) as i64,
            refresh: 30,
        },
        Step::Silent,
    ]);
    let client = builder(transport.clone(), Duration::from_secs(5))
        .max_resources_per_request(1)
        .build()
        .unwrap();
    let a = client.resource("a", ResourceOptions::new(7.0)).unwrap();
    let b = client.resource("b", ResourceOptions::new(7.0)).unwrap();
    let mut errors = client.watch_last_error();
    tokio::time::timeout(HANG, errors.wait_for(Option::is_some))
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(HANG, async {
        while transport.calls() < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap();
    let granted = [&a, &b]
        .iter()
        .filter(|r| r.current().source == CapacitySource::Lease)
        .count();
    assert_eq!(granted, 1, "the round is still in flight");
    assert_eq!(client.last_error(), None);
}

#[tokio::test(start_paused = true)]
async fn a_round_for_many_resources_is_split_by_size() {
    let grant = Step::Grant {
        capacity: 1.0,
        expiry_time: (T0 + 60) as i64,
        refresh: 30,
    };
    let transport = Scripted::new(vec![grant]);
    let client = builder(transport.clone(), Duration::from_secs(5))
        .id("c")
        .max_resources_per_request(1000)
        .max_request_bytes(20_000)
        .build()
        .unwrap();
    // 2,500 resources of 20-byte ids: each entry is 2 + 20 (id) + 9
    // (wants) + 2 (priority) = 33 bytes encoded, 35 as a field.
    let resources: Vec<_> = (0..2_500)
        .map(|i| {
            client
                .resource(format!("resource-{i:011}"), ResourceOptions::new(1.0))
                .unwrap()
        })
        .collect();
    for r in &resources {
        wait_source(r, CapacitySource::Lease).await;
    }
    let sizes = transport.sizes.lock().unwrap().clone();
    // The base message is 3 bytes (client id "c"); 571 entries make
    // 3 + 571 * 35 = 19,988 bytes, one more would pass 20,000.
    let counts: Vec<usize> = sizes.iter().map(|s| s.0).collect();
    assert_eq!(counts.iter().sum::<usize>(), 2_500, "{sizes:?}");
    assert!(
        sizes.iter().all(|&(n, bytes)| n <= 571 && bytes <= 20_000),
        "{sizes:?}"
    );
    assert_eq!(sizes[..4], [(571, 19_988); 4]);
    drop(resources);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let releases = transport.releases.lock().unwrap().clone();
    assert_eq!(releases.iter().map(|r| r.0).sum::<usize>(), 2_500);
    assert!(
        releases
            .iter()
            .all(|&(n, bytes)| n <= 1000 && bytes <= 20_000),
        "{releases:?}"
    );
}

#[test]
fn split_keeps_each_request_within_both_limits() {
    use super::split;
    // Entries of 10 bytes add 12 each to a base of 3.
    assert_eq!(split(3, [10; 5].into_iter(), 2, 1000), [0..2, 2..4, 4..5]);
    assert_eq!(
        split(3, [10; 5].into_iter(), 100, 3 + 24),
        [0..2, 2..4, 4..5]
    );
    assert_eq!(
        split(3, [10; 5].into_iter(), 100, 3 + 23),
        [0..1, 1..2, 2..3, 3..4, 4..5]
    );
    // An entry larger than the limit goes alone.
    assert_eq!(
        split(3, [10, 500, 10].into_iter(), 100, 50),
        [0..1, 1..2, 2..3]
    );
    assert_eq!(
        split(3, std::iter::empty(), 100, 50),
        Vec::<std::ops::Range<usize>>::new()
    );
    // A size's varint grows past 127 bytes.
    assert_eq!(split(0, [127, 128].into_iter(), 100, 129 + 131), [0..2]);
    assert_eq!(
        split(0, [127, 128].into_iter(), 100, 129 + 130),
        [0..1, 1..2]
    );
}
