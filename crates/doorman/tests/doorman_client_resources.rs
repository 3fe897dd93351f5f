//! GaugeResource, RateResource and LeaseLayer (generic and in a tonic
//! server) against an in-process server. Only one assertion is about time,
//! on paused tokio time.

use std::sync::Arc;
use std::time::Duration;

use tollgate_doorman::pb;
use tollgate_doorman::{
    CapacitySource, Client, ExpiryMode, GaugeResource, LeaseLayer, RateOptions, RateResource,
    Rejected, ResourceOptions,
};
use tower::{Layer as _, ServiceExt as _};

#[path = "common/lease_server.rs"]
mod lease_server;

const HANG: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
resources:
  - identifier_glob: closed
    capacity: 0
    algorithm: {kind: STATIC, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: STATIC, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
"#;

async fn start() -> Client {
    let (_, addr) = lease_server::serve(CONFIG).await;
    Client::builder().server(addr).build().unwrap()
}

async fn leased(rx: &mut tokio::sync::watch::Receiver<tollgate_doorman::Capacity>) {
    tokio::time::timeout(HANG, rx.wait_for(|c| c.source == CapacitySource::Lease))
        .await
        .unwrap()
        .unwrap();
}

/// A rate resource on `client`, once its first lease has come.
async fn leased_rate(client: &Client, id: &str, options: RateOptions) -> RateResource {
    let rate = RateResource::new(client, id, options).unwrap();
    leased(&mut rate.resource().watch()).await;
    rate
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gauge_caps_operations_in_flight_at_the_lease() {
    // Before any answer (nothing listens on this port) a safe-mode gauge
    // has no safe capacity and admits nothing.
    let dead = tollgate_testkit::net::nowhere().await;
    let unanswered = Client::builder().server(dead).build().unwrap();
    let gauge = GaugeResource::new(&unanswered, "gauge", ResourceOptions::new(2.7), None).unwrap();
    assert_eq!(gauge.resource().current().source, CapacitySource::Pending);
    assert_eq!(gauge.limit(), 0, "nothing before the lease");
    assert!(gauge.try_mark().is_none());

    let client = start().await;
    // STATIC grants the 2.7 asked for: two operations may be in flight.
    let gauge = GaugeResource::new(&client, "gauge", ResourceOptions::new(2.7), None).unwrap();
    leased(&mut gauge.resource().watch()).await;
    assert_eq!(gauge.limit(), 2);
    let a = gauge.try_mark().unwrap();
    let _b = gauge.try_mark().unwrap();
    assert!(gauge.try_mark().is_none());
    assert_eq!(gauge.in_flight(), 2);

    // A waiter gets in when a guard drops.
    let gauge = Arc::new(gauge);
    let waiter = {
        let gauge = gauge.clone();
        tokio::spawn(async move {
            let _g = gauge.mark().await;
            gauge.in_flight()
        })
    };
    tokio::task::yield_now().await;
    drop(a);
    assert_eq!(
        tokio::time::timeout(HANG, waiter).await.unwrap().unwrap(),
        2
    );
    assert_eq!(gauge.in_flight(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_rejects_when_the_lease_is_zero_and_admits_when_it_is_not() {
    let client = start().await;
    let closed = leased_rate(
        &client,
        "closed",
        RateOptions::new(ResourceOptions::new(10.0).mode(ExpiryMode::Optimistic)),
    )
    .await;
    assert_eq!(closed.capacity(), 0.0);
    assert!(!closed.try_acquire());
    let closed = Arc::new(closed);
    let echo = tower::service_fn(|x: u32| async move { Ok::<_, tower::BoxError>(x) });

    let svc = LeaseLayer::new(closed.clone(), Duration::from_millis(5)).layer(echo);
    let err = svc.oneshot(1).await.unwrap_err();
    let rejected = err.downcast_ref::<Rejected>().expect("a Rejected error");
    assert_eq!(rejected.resource(), "closed");
    assert_eq!(rejected.max_wait(), Duration::from_millis(5));

    let svc = LeaseLayer::new(closed, Duration::from_millis(5))
        .grpc()
        .layer(echo);
    let err = svc.oneshot(1).await.unwrap_err();
    let status = err.downcast_ref::<tonic::Status>().expect("a tonic Status");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);

    let open = leased_rate(
        &client,
        "open",
        RateOptions::new(ResourceOptions::new(50.0)),
    )
    .await;
    assert_eq!(open.limiter().spec().ops_per_sec(), 50.0);
    let svc = LeaseLayer::new(Arc::new(open), HANG).layer(echo);
    assert_eq!(svc.oneshot(7).await.unwrap(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estimated_wants_follow_the_demand_that_was_refused() {
    use tollgate_doorman::Smoothing;
    let client = start().await;
    // Starts asking for 5/s; the server (STATIC, cap 100) grants what is
    // asked, so wants are what the server records.
    let options = RateOptions::new(ResourceOptions::new(5.0)).estimate(Smoothing {
        tau: Duration::from_secs(1),
        headroom: 1.0,
        floor: 1.0,
    });
    let rate = leased_rate(&client, "estimated", options).await;
    let mut rx = rate.resource().watch();
    assert_eq!(rate.capacity(), 5.0);
    // 20,000 ops asked for within one refresh interval (mostly refused):
    // whatever the interval's length, the demand is far above 5/s; the next
    // grants rise to the STATIC cap of 100.
    for _ in 0..20_000 {
        rate.try_acquire();
    }
    let before = rx.borrow().refreshes;
    let c = tokio::time::timeout(HANG, rx.wait_for(|c| c.refreshes >= before + 2))
        .await
        .unwrap()
        .unwrap()
        .clone();
    assert_eq!(c.capacity, 100.0, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_any_answer_each_mode_applies_its_fallback() {
    // Nothing listens on this port.
    let dead = tollgate_testkit::net::nowhere().await;
    let client = Client::builder().server(dead).build().unwrap();
    let make = |id: &str, mode| {
        RateResource::new(
            &client,
            id,
            RateOptions::new(ResourceOptions::new(40.0).mode(mode)),
        )
        .unwrap()
    };
    let optimistic = make("o", ExpiryMode::Optimistic);
    let pessimistic = make("p", ExpiryMode::Pessimistic);
    let safe = make("s", ExpiryMode::Safe);
    for r in [&optimistic, &pessimistic, &safe] {
        assert_eq!(r.resource().current().source, CapacitySource::Pending);
    }
    assert_eq!(optimistic.capacity(), 40.0);
    assert_eq!(optimistic.limiter().spec().ops_per_sec(), 40.0);
    assert!(optimistic.try_acquire());
    // No safe capacity is known before the first answer: safe acts as
    // pessimistic.
    for r in [&pessimistic, &safe] {
        assert_eq!(r.capacity(), 0.0);
        assert!(!r.try_acquire());
        let rejected = r.acquire_timeout(Duration::from_millis(1)).await;
        assert!(rejected.is_err());
    }
    // Release cannot reach a server; it says so rather than hanging.
    let e = optimistic.release().await.unwrap_err();
    assert!(e.to_string().starts_with("release not acknowledged"), "{e}");
}

/// Paused tokio time: the layer waits exactly its bound, then rejects.
#[tokio::test(start_paused = true)]
async fn the_layer_waits_exactly_its_bound_before_rejecting() {
    let dead = tollgate_testkit::net::nowhere().await;
    let client = Client::builder().server(dead).build().unwrap();
    let rate = RateResource::new(
        &client,
        "never",
        RateOptions::new(ResourceOptions::new(40.0).mode(ExpiryMode::Pessimistic)),
    )
    .unwrap();
    let echo = tower::service_fn(|x: u32| async move { Ok::<_, tower::BoxError>(x) });
    let svc = LeaseLayer::new(Arc::new(rate), Duration::from_millis(250)).layer(echo);
    let start = tokio::time::Instant::now();
    let err = svc.oneshot(1).await.unwrap_err();
    assert!(err.is::<Rejected>());
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

/// A trivial Doorman service to put behind the layer.
#[derive(Debug, Clone)]
struct Discovering;

#[tonic::async_trait]
impl pb::capacity_server::Capacity for Discovering {
    async fn discovery(
        &self,
        _: tonic::Request<pb::DiscoveryRequest>,
    ) -> Result<tonic::Response<pb::DiscoveryResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::DiscoveryResponse {
            mastership: pb::Mastership::default(),
            is_master: true,
        }))
    }
    async fn get_capacity(
        &self,
        _: tonic::Request<pb::GetCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetCapacityResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn get_server_capacity(
        &self,
        _: tonic::Request<pb::GetServerCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetServerCapacityResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn release_capacity(
        &self,
        _: tonic::Request<pb::ReleaseCapacityRequest>,
    ) -> Result<tonic::Response<pb::ReleaseCapacityResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
}

/// Serves `Discovering` behind `layer`; returns a connected gRPC client.
async fn layered_tonic(
    layer: LeaseLayer,
) -> pb::capacity_client::CapacityClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(pb::capacity_server::CapacityServer::new(Discovering))
            .serve_with_incoming(incoming),
    );
    pb::capacity_client::CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_server_answers_resource_exhausted_when_the_lease_is_spent() {
    let client = start().await;
    let closed = leased_rate(
        &client,
        "closed",
        RateOptions::new(ResourceOptions::new(10.0)),
    )
    .await;
    let layer = LeaseLayer::new(Arc::new(closed), Duration::from_millis(5)).grpc();
    let mut grpc = layered_tonic(layer).await;
    let status = grpc.discovery(pb::DiscoveryRequest {}).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("\"closed\""), "{status}");

    let open = leased_rate(
        &client,
        "open",
        RateOptions::new(ResourceOptions::new(50.0)),
    )
    .await;
    let mut grpc = layered_tonic(LeaseLayer::new(Arc::new(open), HANG).grpc()).await;
    assert!(
        grpc.discovery(pb::DiscoveryRequest {})
            .await
            .unwrap()
            .into_inner()
            .is_master
    );
}

/// 3,000 resources with 40-byte ids: one request would name more than the
/// server's 1,000 and pass its 64 KiB, so the client splits each round
/// (and its release) into requests the server accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_resources_on_one_client_are_all_leased_and_released() {
    let (server, addr) = lease_server::serve(CONFIG).await;
    let client = Client::builder().server(addr).build().unwrap();
    let resources: Vec<_> = (0..3_000)
        .map(|i| {
            let id = format!("resource-with-a-forty-byte-id-{i:010}");
            assert_eq!(id.len(), 40);
            client.resource(id, ResourceOptions::new(0.01)).unwrap()
        })
        .collect();
    for r in &resources {
        leased(&mut r.watch()).await;
        assert_eq!(r.capacity(), 0.01);
    }
    assert_eq!(client.last_error(), None);
    let status = server.status();
    assert_eq!(status.len(), 3_000);
    assert!(status.iter().all(|r| r.sum_has == 0.01));
    for r in resources {
        r.release().await.unwrap();
    }
    assert!(server.status().iter().all(|r| r.sum_has == 0.0));
}

/// A request the server refuses for what it is stops the client at once,
/// with the server's reason, instead of retrying it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_client_id_stops_the_client_with_the_servers_reason() {
    let (_server, addr) = lease_server::serve(CONFIG).await;
    let client = Client::builder()
        .server(addr.clone())
        .id("c".repeat(2_000))
        .build()
        .unwrap();
    let r = client.resource("a", ResourceOptions::new(1.0)).unwrap();
    tokio::time::timeout(HANG, r.watch().changed())
        .await
        .unwrap()
        .unwrap();
    let error = r.error().expect("the client stopped");
    assert!(error.is_permanent());
    assert_eq!(
        error.to_string(),
        format!(
            "{addr}: InvalidArgument: client_id is 2000 bytes long, more than the limit of 1024: \
             the server refuses the request as it stands"
        )
    );
    assert_eq!(r.current().source, CapacitySource::Pending);
}
