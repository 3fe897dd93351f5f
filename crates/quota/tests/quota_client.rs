//! The quota clients against a real server on 127.0.0.1:0 whose buckets run
//! on a frozen manual clock, so every count is exact: the naive client
//! (service, fallback, circuit, deadline), the smart client (bulk refill,
//! fallback rate) and the tower layer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{BucketSettings, ManualClock, RateSpec};
use tollgate_quota::pb::quota_service_server::{QuotaService, QuotaServiceServer};
use tollgate_quota::pb::{AllowRequest, AllowResponse};
use tollgate_quota::{
    Admit as _, AdmitSource, NaiveClient, NaiveOptions, QuotaLayer, QuotaLayerError, SmartClient,
    SmartOptions,
};
use tollgate_quota::{Quota, QuotaConfig, QuotaLimits, QuotaServer, Status};
use tower::{Layer as _, ServiceExt as _};

const CONFIG: &str = "\
namespaces:
  svc:
    buckets:
      two: {size: 2, fill_rate: 1, wait_timeout_millis: 10}
      hundred: {size: 100, fill_rate: 1, max_tokens_per_request: 10}
      patient: {size: 1, fill_rate: 1, wait_timeout_millis: 60000}
";

/// A server on a frozen clock: buckets never refill.
async fn server() -> (Arc<Quota>, String) {
    let quota = Arc::new(Quota::new(
        QuotaConfig::from_yaml(CONFIG).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(QuotaServer::builder(Arc::clone(&quota)).serve(listener, std::future::pending()));
    (quota, addr)
}

/// An address nothing listens on.
async fn dead_address() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().to_string()
}

/// A fallback of `size` tokens on a frozen clock that never waits and
/// never borrows (no debt).
fn fallback(size: u64) -> (NaiveOptions, ManualClock) {
    let clock = ManualClock::new();
    let options = NaiveOptions::new(RateSpec::new(1.0).unwrap())
        .fallback(
            BucketSettings::new(RateSpec::new(1.0).unwrap())
                .size(size)
                .max_wait(Duration::ZERO)
                .max_debt(Duration::ZERO),
        )
        .deadline(Duration::from_secs(5))
        .clock(Arc::new(clock.clone()));
    (options, clock)
}

#[tokio::test]
async fn naive_asks_the_service_and_obeys_its_refusal() {
    let (_quota, addr) = server().await;
    let (options, _) = fallback(5);
    let client = NaiveClient::new(&addr, "svc", "two", options).unwrap();
    // Two on hand, and a third borrowed at once.
    for _ in 0..3 {
        let admitted = client.admit(1).await.unwrap();
        assert_eq!(
            (admitted.source, admitted.waited),
            (AdmitSource::Service, Duration::ZERO)
        );
    }
    // The service says 1 s is owed, beyond its 10 ms timeout: refused by
    // the service, not sent to the fallback.
    let denied = client.admit(1).await.unwrap_err();
    assert_eq!(denied.status(), Some(Status::RejectedTimeout));
    assert_eq!(
        denied.to_string(),
        "quota denied by the service: REJECTED_TIMEOUT"
    );
    assert_eq!((client.fallbacks(), client.timeouts()), (0, 0));
}

#[tokio::test]
async fn naive_allow_hands_back_the_wait_to_honour() {
    let (_quota, addr) = server().await;
    let (options, _) = fallback(5);
    let client = NaiveClient::new(&addr, "svc", "patient", options).unwrap();
    // One on hand, one borrowed, then each call waits for the debt before
    // it: 0, 0, 1 s, 2 s, handed back rather than slept.
    let mut waits = Vec::new();
    for _ in 0..4 {
        let granted = client.allow(1).await.unwrap();
        assert_eq!(granted.source, AdmitSource::Service);
        waits.push(granted.wait);
    }
    assert_eq!(
        waits,
        [0, 0, 1000, 2000].map(Duration::from_millis).to_vec()
    );
    // Without a bucket the fallback answers, with its own wait (none here).
    let client = NaiveClient::new(&addr, "svc", "unknown", fallback(1).0).unwrap();
    let granted = client.allow(1).await.unwrap();
    assert_eq!(
        (granted.source, granted.wait),
        (AdmitSource::Fallback, Duration::ZERO)
    );
    assert!(client.allow(1).await.is_err());
}

#[tokio::test]
async fn naive_falls_back_without_a_bucket() {
    let (_quota, addr) = server().await;
    let (options, _) = fallback(3);
    let client = NaiveClient::new(&addr, "svc", "unknown", options).unwrap();
    for _ in 0..3 {
        assert_eq!(client.admit(1).await.unwrap().source, AdmitSource::Fallback);
    }
    let denied = client.admit(1).await.unwrap_err();
    assert_eq!(denied.status(), None);
    assert_eq!(client.fallbacks(), 3);
}

#[tokio::test]
async fn naive_falls_back_when_the_service_is_down_and_stops_asking() {
    let addr = dead_address().await;
    let (options, clock) = fallback(4);
    let options = options.circuit(2, Duration::from_secs(1));
    let client = NaiveClient::new(&addr, "svc", "two", options).unwrap();
    for _ in 0..4 {
        assert_eq!(client.admit(1).await.unwrap().source, AdmitSource::Fallback);
    }
    // Two failures opened the circuit: calls 3 and 4 did not ask.
    assert_eq!(client.timeouts(), 2);
    assert!(client.admit(1).await.is_err());
    assert_eq!(client.timeouts(), 2);
    // A second later it asks again (and fails again).
    clock.advance(Duration::from_secs(1));
    assert!(client.admit(1).await.is_ok()); // the fallback earned 1 token
    assert_eq!(client.timeouts(), 3);
}

/// A quota service that never answers.
#[derive(Debug)]
struct Silent;

#[tonic::async_trait]
impl QuotaService for Silent {
    async fn allow(
        &self,
        _: tonic::Request<AllowRequest>,
    ) -> Result<tonic::Response<AllowResponse>, tonic::Status> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn naive_falls_back_when_the_service_misses_the_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(QuotaServiceServer::new(Silent))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let (options, _) = fallback(2);
    let options = options.deadline(Duration::from_millis(30));
    let client = NaiveClient::new(&addr, "svc", "two", options).unwrap();
    assert_eq!(client.admit(1).await.unwrap().source, AdmitSource::Fallback);
    assert_eq!((client.timeouts(), client.fallbacks()), (1, 1));
}

#[tokio::test]
async fn smart_fetches_in_batches_and_never_more_than_the_service_grants() {
    let (quota, addr) = server().await;
    let options = SmartOptions::new(10, 0.0)
        .refresh(Duration::from_millis(2))
        .max_wait(Duration::from_millis(300));
    let client = SmartClient::new(&addr, "svc", "hundred", options).unwrap();
    let mut admitted = 0;
    for _ in 0..100 {
        let a = client.admit(1).await.unwrap();
        assert_eq!(a.source, AdmitSource::Local);
        admitted += 1;
    }
    // The server's 100 tokens are spent (its clock is frozen) and a batch
    // of ten borrowed, 10 s of debt: the next batch would wait that long,
    // beyond the refresh interval the client allows. Refused.
    for _ in 0..10 {
        assert_eq!(client.admit(1).await.unwrap().source, AdmitSource::Local);
        admitted += 1;
    }
    let options_wait = client.admit(1).await.unwrap_err();
    assert_eq!(options_wait.status(), None);
    assert_eq!(
        (admitted, client.fetched(), client.fallback_tokens()),
        (110, 110, 0)
    );
    // Eleven requests of ten on the service's side, not 110 of one.
    let text = quota.metrics().render();
    assert!(
        text.contains("tollgate_quota_tokens_served_total{namespace=\"svc\"} 110"),
        "{text}"
    );
    let served: u64 = text
        .lines()
        .filter(|l| l.starts_with("tollgate_quota_requests_served_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(served, 11);
}

#[tokio::test]
async fn smart_uses_the_fallback_rate_while_the_service_is_down() {
    let addr = dead_address().await;
    let options = SmartOptions::new(10, 1000.0)
        .refresh(Duration::from_millis(5))
        .deadline(Duration::from_millis(50))
        .max_wait(Duration::from_secs(5));
    let client = SmartClient::new(&addr, "svc", "hundred", options).unwrap();
    for _ in 0..5 {
        assert_eq!(client.admit(1).await.unwrap().source, AdmitSource::Local);
    }
    assert_eq!(client.fetched(), 0);
    assert!(client.fallback_tokens() >= 5);
}

#[tokio::test]
async fn the_layer_keeps_refused_requests_from_the_service() {
    let addr = dead_address().await;
    let (options, _) = fallback(1);
    let client = Arc::new(NaiveClient::new(&addr, "svc", "two", options).unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let svc = QuotaLayer::new(client, 1).layer(tower::service_fn(move |x: u32| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, std::convert::Infallible>(x * 2) }
    }));
    assert_eq!(svc.clone().oneshot(21).await.unwrap(), 42);
    match svc.oneshot(1).await {
        Err(QuotaLayerError::Denied(d)) => assert_eq!(d.status(), None),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_layer_works_with_the_smart_client() {
    let (_quota, addr) = server().await;
    let options = SmartOptions::new(10, 0.0).refresh(Duration::from_millis(2));
    let client = Arc::new(SmartClient::new(&addr, "svc", "hundred", options).unwrap());
    let svc =
        QuotaLayer::new(Arc::clone(&client), 3).layer(tower::service_fn(|x: u32| async move {
            Ok::<_, std::convert::Infallible>(x + 1)
        }));
    for i in 0..5 {
        assert_eq!(svc.clone().oneshot(i).await.unwrap(), i + 1);
    }
    assert!(client.fetched() >= 15);
}
