//! The lease client against scripted fake servers: golden bytes as the Go
//! server encodes them, redirects, and junk.
//!
//! The golden messages are written by hand from the wire table
//! (`doorman-protocol.md` §1), decoded with the crate's generated types and
//! served by a fake tonic server, so the test covers both the byte layout
//! and what the client does with it. The client reads lease expiry against
//! a manual clock, so the fixed expiry times in the bytes stay in the
//! future.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message as _;
use tokio::sync::watch;
use tollgate::ManualClock;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_server::{Capacity as CapacityService, CapacityServer};
use tollgate_doorman::{Backoff, Capacity, CapacitySource, Client, ExpiryMode, ResourceOptions};
use tollgate_testkit::logs::Logs;

/// The client's Unix time.
const T0: u64 = 1_700_000_000;
const HANG: Duration = Duration::from_secs(60);

/// GetCapacityResponse { response { resource_id: "fair", gets { expiry_time:
/// 1700000060, refresh_interval: 5, capacity: 100.0 }, safe_capacity: 10.0 } }
/// in field order, every required field present, as Go's proto2 encoder
/// writes it.
const GOLDEN_LEASE: &[u8] = &[
    0x0a, 0x22, // response (1, LEN), 34 bytes
    0x0a, 0x04, b'f', b'a', b'i', b'r', // resource_id (1, LEN) "fair"
    0x12, 0x11, // gets (2, LEN), 17 bytes
    0x08, 0xbc, 0xe2, 0xcf, 0xaa, 0x06, // expiry_time (1, VARINT) 1700000060
    0x10, 0x05, // refresh_interval (2, VARINT) 5
    0x19, 0, 0, 0, 0, 0, 0, 0x59, 0x40, // capacity (3, I64) 100.0
    0x19, 0, 0, 0, 0, 0, 0, 0x24, 0x40, // safe_capacity (3, I64) 10.0
];

/// GetCapacityResponse { mastership {} }: "not the master, master unknown".
const GOLDEN_NO_MASTER: &[u8] = &[0x12, 0x00];

/// GetCapacityResponse { mastership { master_address: address } }: a bare
/// redirect, no responses.
fn golden_redirect(address: &str) -> Vec<u8> {
    let a = address.as_bytes();
    let mut out = vec![0x12, (a.len() + 2) as u8, 0x0a, a.len() as u8];
    out.extend_from_slice(a);
    out
}

#[test]
fn golden_bytes_decode_to_the_expected_messages() {
    let r = pb::GetCapacityResponse::decode(GOLDEN_LEASE).unwrap();
    assert!(r.mastership.is_none());
    assert_eq!(r.response.len(), 1);
    let rr = &r.response[0];
    assert_eq!(rr.resource_id, "fair");
    assert_eq!(rr.gets.expiry_time, 1_700_000_060);
    assert_eq!(rr.gets.refresh_interval, 5);
    assert_eq!(rr.gets.capacity, 100.0);
    assert_eq!(rr.safe_capacity, Some(10.0));
    // Our encoder writes the same bytes.
    assert_eq!(r.encode_to_vec(), GOLDEN_LEASE);

    let r = pb::GetCapacityResponse::decode(GOLDEN_NO_MASTER).unwrap();
    assert!(r.response.is_empty());
    assert_eq!(r.mastership.unwrap().master_address, None);

    let r = pb::GetCapacityResponse::decode(&golden_redirect("10.0.0.1:15000")[..]).unwrap();
    assert_eq!(
        r.mastership.unwrap().master_address.as_deref(),
        Some("10.0.0.1:15000")
    );
}

/// A server that answers GetCapacity from a script (repeating the last
/// answer) and has no Discovery, as a minimal Doorman server might.
#[derive(Debug, Clone, Default)]
struct Fake {
    script: Arc<Mutex<VecDeque<pb::GetCapacityResponse>>>,
    requests: Arc<Mutex<Vec<pb::GetCapacityRequest>>>,
    releases: Arc<AtomicUsize>,
}

impl Fake {
    fn new(script: impl IntoIterator<Item = pb::GetCapacityResponse>) -> Fake {
        let fake = Fake::default();
        fake.script.lock().unwrap().extend(script);
        fake
    }

    fn requests(&self) -> Vec<pb::GetCapacityRequest> {
        self.requests.lock().unwrap().clone()
    }

    async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let service = CapacityServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
        addr
    }
}

#[tonic::async_trait]
impl CapacityService for Fake {
    async fn discovery(
        &self,
        _: tonic::Request<pb::DiscoveryRequest>,
    ) -> Result<tonic::Response<pb::DiscoveryResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("no discovery here"))
    }

    async fn get_capacity(
        &self,
        request: tonic::Request<pb::GetCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetCapacityResponse>, tonic::Status> {
        self.requests.lock().unwrap().push(request.into_inner());
        let mut script = self.script.lock().unwrap();
        let answer = if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script.front().cloned().unwrap_or_default()
        };
        Ok(tonic::Response::new(answer))
    }

    async fn get_server_capacity(
        &self,
        _: tonic::Request<pb::GetServerCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetServerCapacityResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not a root"))
    }

    async fn release_capacity(
        &self,
        _: tonic::Request<pb::ReleaseCapacityRequest>,
    ) -> Result<tonic::Response<pb::ReleaseCapacityResponse>, tonic::Status> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(tonic::Response::new(pb::ReleaseCapacityResponse::default()))
    }
}

fn client(addr: &str) -> Client {
    Client::builder()
        .server(addr)
        .clock(Arc::new({
            let clock = ManualClock::new();
            clock.advance(Duration::from_secs(T0));
            clock
        }))
        .rpc_timeout(Duration::from_secs(2))
        .backoff(Backoff {
            base: Duration::from_millis(100),
            factor: 1.5,
            max: Duration::from_millis(500),
            jitter: 0.5,
        })
        .build()
        .unwrap()
}

async fn wait_for(
    rx: &mut watch::Receiver<Capacity>,
    pred: impl FnMut(&Capacity) -> bool,
) -> Capacity {
    let found = match tokio::time::timeout(HANG, rx.wait_for(pred)).await {
        Ok(Ok(c)) => Some(c.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("still {:?}", *rx.borrow()))
}

fn decode(bytes: &[u8]) -> pb::GetCapacityResponse {
    pb::GetCapacityResponse::decode(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_redirect_is_followed_at_once_to_a_go_encoded_lease() {
    let master = Fake::new([decode(GOLDEN_LEASE)]);
    let master_addr = master.serve().await;
    // The first server first says "master unknown", then redirects.
    let redirector = Fake::new([
        decode(GOLDEN_NO_MASTER),
        decode(&golden_redirect(&master_addr)),
    ]);
    let redirector_addr = redirector.serve().await;

    let c = client(&redirector_addr);
    let r = c
        .resource("fair", ResourceOptions::new(150.0).priority(3))
        .unwrap();
    let mut rx = r.watch();
    let got = wait_for(&mut rx, |c| c.source == CapacitySource::Lease).await;
    assert_eq!(got.capacity, 100.0);
    assert_eq!(got.safe_capacity, Some(10.0));
    let lease = got.lease.unwrap();
    assert_eq!(lease.expiry, Duration::from_secs(1_700_000_060));
    assert_eq!(lease.refresh_interval, Duration::from_secs(5));
    assert_eq!(got.refreshes, 1);

    // One "unknown" answer (a failed round), one redirect, then the master.
    assert_eq!(redirector.requests().len(), 2);
    let sent = &master.requests()[0];
    assert_eq!(sent.client_id, c.id());
    assert_eq!(sent.resource.len(), 1);
    assert_eq!(sent.resource[0].resource_id, "fair");
    assert_eq!(sent.resource[0].priority, 3);
    assert_eq!(sent.resource[0].wants, 150.0);
    assert_eq!(sent.resource[0].has, None);
    r.release().await.unwrap();
    assert_eq!(master.releases.load(Ordering::SeqCst), 1);
}

fn answer(
    id: &str,
    capacity: f64,
    expiry: i64,
    refresh: i64,
    safe: Option<f64>,
) -> pb::GetCapacityResponse {
    pb::GetCapacityResponse {
        response: vec![pb::ResourceResponse {
            resource_id: id.to_owned(),
            gets: pb::Lease {
                expiry_time: expiry,
                refresh_interval: refresh,
                capacity,
            },
            safe_capacity: safe,
        }],
        mastership: None,
    }
}

#[tokio::test]
async fn junk_from_the_server_is_logged_and_never_panics() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // Global, not scoped to this thread: a callsite first reached by a
    // concurrent test without a subscriber could otherwise stay disabled.
    // Other tests' lines may land in `logs` too; the checks only look for
    // this test's messages.
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let t = T0 as i64;
    let missing_gets = pb::GetCapacityResponse {
        response: vec![pb::ResourceResponse {
            resource_id: "r".to_owned(),
            ..Default::default()
        }],
        mastership: None,
    };
    let fake = Fake::new([
        answer("r", 50.0, t + 60, 1, Some(5.0)),
        answer("r", f64::NAN, t + 60, 1, None),
        answer("r", -3.0, t + 60, 1, None),
        answer("r", f64::INFINITY, t + 60, 1, None),
        missing_gets,
        answer("someone-else", 99.0, t + 60, 1, None),
        answer("r", 70.0, t + 60, 0, Some(f64::NAN)),
        answer("r", 80.0, t - 10, 1, None),
        answer("r", 90.0, t + 60, 1, None),
    ]);
    let addr = fake.serve().await;
    let c = client(&addr);
    let r = c
        .resource("r", ResourceOptions::new(100.0).mode(ExpiryMode::Safe))
        .unwrap();
    let mut rx = r.watch();

    let first = wait_for(&mut rx, |c| c.source == CapacitySource::Lease).await;
    assert_eq!(first.capacity, 50.0);
    // The five junk answers change nothing; the repaired one is taken.
    let repaired = wait_for(&mut rx, |c| c.capacity == 70.0).await;
    assert_eq!(repaired.refreshes, 2);
    assert_eq!(
        repaired.lease.unwrap().refresh_interval,
        Duration::from_secs(1)
    );
    assert_eq!(
        repaired.safe_capacity,
        Some(5.0),
        "NaN safe capacity dropped"
    );
    // Expiry in the past: the lease counts as expired; safe mode applies.
    let expired = wait_for(&mut rx, |c| c.refreshes == 3).await;
    assert_eq!(expired.source, CapacitySource::Expired);
    assert_eq!(expired.capacity, 5.0);
    // And a good answer afterwards is used: the task survived.
    let last = wait_for(&mut rx, |c| c.capacity == 90.0).await;
    assert_eq!(last.source, CapacitySource::Lease);
    assert_eq!(last.refreshes, 4);

    let text = logs.text();
    for needle in [
        "granted capacity NaN",
        "granted capacity -3",
        "granted capacity inf",
        "no lease",
        "not asked for",
        "refresh_interval 0 s raised",
        "safe_capacity NaN ignored",
        "expiry_time 1699999990 is not after now",
    ] {
        assert!(text.contains(needle), "log lacks {needle:?}:\n{text}");
    }
    drop(r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bulk_request_at_the_smallest_refresh_interval() {
    let t = T0 as i64;
    let mut both = answer("a", 1.0, t + 7200, 1, None);
    both.response
        .extend(answer("b", 2.0, t + 7200, 3600, None).response);
    let fake = Fake::new([both]);
    let addr = fake.serve().await;
    let c = client(&addr);
    let a = c.resource("a", ResourceOptions::new(1.0)).unwrap();
    let b = c.resource("b", ResourceOptions::new(2.0)).unwrap();
    // "b" asks to be refreshed hourly, but rides along with "a" every second.
    let mut rx = b.watch();
    let got = wait_for(&mut rx, |c| c.refreshes >= 3).await;
    assert_eq!(got.capacity, 2.0);
    let requests = fake.requests();
    let last = requests.last().unwrap();
    let ids: Vec<&str> = last
        .resource
        .iter()
        .map(|r| r.resource_id.as_str())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"a") && ids.contains(&"b"), "{ids:?}");
    // Valid leases are reported back as `has`.
    for r in &last.resource {
        assert!(r.has.is_some(), "{r:?}");
    }
    drop((a, b));
}

/// What the client sends must carry every required field, zero values
/// included: Go's proto2 decoder rejects a message without them.
#[test]
fn requests_encode_required_zero_fields() {
    let request = pb::GetCapacityRequest {
        client_id: "h:1:0".to_owned(),
        resource: vec![pb::ResourceRequest {
            resource_id: "a".to_owned(),
            priority: 0,
            has: None,
            wants: 0.0,
        }],
    };
    let golden: &[u8] = &[
        0x0a, 0x05, b'h', b':', b'1', b':', b'0', // client_id (1, LEN)
        0x12, 0x0e, // resource (2, LEN), 14 bytes
        0x0a, 0x01, b'a', // resource_id (1, LEN)
        0x10, 0x00, // priority (2, VARINT) 0
        0x21, 0, 0, 0, 0, 0, 0, 0, 0, // wants (4, I64) 0.0
    ];
    assert_eq!(request.encode_to_vec(), golden);
    let release = pb::ReleaseCapacityRequest {
        client_id: String::new(),
        resource_id: vec!["a".to_owned()],
    };
    assert_eq!(release.encode_to_vec(), [0x0a, 0x00, 0x12, 0x01, b'a']);
}
