//! End to end over gRPC: a real tonic server (the quota service's
//! `quotaservice.QuotaService`) behind `ThrottleLayer` on 127.0.0.1:0,
//! keyed by gRPC metadata, with criticality from metadata, and
//! `RESOURCE_EXHAUSTED` / `UNAVAILABLE` statuses with retry information.

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::net::TcpListener;
use tollgate::{ManualClock, RateSpec};
use tollgate_quota::pb::quota_service_client::QuotaServiceClient;
use tollgate_quota::pb::AllowRequest;
use tollgate_quota::{AllowService, Quota, QuotaConfig, QuotaLimits};
use tollgate_throttle::{Extract, FixedWindow, Limit, Rule, ThrottleLayer, Throttler, Trust};
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request};

/// `google.rpc.Status`, from its proto. These four messages are written
/// here again, not shared with the encoder in `src/render.rs`, on purpose:
/// decoding with the encoder's own definitions would let a wrong tag or
/// type there pass.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

const CONFIG: &str = "\
namespaces:
  ns:
    buckets:
      b: {size: 1000, fill_rate: 1000}
";

/// A quota server behind `throttler`; its address.
async fn serve(throttler: Throttler) -> String {
    let quota = Arc::new(Quota::new(
        QuotaConfig::from_yaml(CONFIG).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(ThrottleLayer::new(throttler))
            .add_service(AllowService::new(quota).into_server())
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

/// An Allow call with the given metadata.
fn allow(metadata: &[(&'static str, &'static str)]) -> Request<AllowRequest> {
    let mut req = Request::new(AllowRequest {
        namespace: "ns".into(),
        bucket_name: "b".into(),
        tokens_requested: 1,
        ..Default::default()
    });
    for (k, v) in metadata {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    req
}

fn window(limit: u64) -> Limit {
    Limit::FixedWindow(FixedWindow::new(limit, Duration::from_secs(60)).unwrap())
}

#[tokio::test]
async fn grpc_metadata_keys_soft_and_hard_limits() {
    let throttler = Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new("per-tenant", Extract::grpc_metadata("x-tenant"), window(2)).soft(window(1)),
        )
        .build();
    let mut client = QuotaServiceClient::connect(serve(throttler).await)
        .await
        .unwrap();

    // Admitted: the service answers.
    let ok = client.allow(allow(&[("x-tenant", "a")])).await.unwrap();
    assert_eq!(ok.get_ref().tokens_granted, 1);
    assert!(ok.metadata().get("ratelimit-warning").is_none());
    // Over the soft limit: answered, with a warning in the metadata.
    let warned = client.allow(allow(&[("x-tenant", "a")])).await.unwrap();
    assert_eq!(warned.get_ref().tokens_granted, 1);
    assert_eq!(warned.metadata().get("ratelimit-limit").unwrap(), "2");
    assert_eq!(warned.metadata().get("ratelimit-remaining").unwrap(), "0");
    assert_eq!(
        warned.metadata().get("ratelimit-warning").unwrap(),
        "soft limit of rule \"per-tenant\" exceeded"
    );
    // Over the hard limit: RESOURCE_EXHAUSTED with the time to retry (the
    // window of 60 s ends 60 s from the manual clock's start).
    let status = client.allow(allow(&[("x-tenant", "a")])).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "rate limited by rule \"per-tenant\"");
    assert_eq!(status.metadata().get("retry-after").unwrap(), "60");
    let details = RpcStatus::decode(status.details()).unwrap();
    assert_eq!(details.code, Code::ResourceExhausted as i32);
    assert_eq!(details.message, "rate limited by rule \"per-tenant\"");
    assert_eq!(details.details.len(), 1);
    assert_eq!(
        details.details[0].type_url,
        "type.googleapis.com/google.rpc.RetryInfo"
    );
    let retry = RetryInfo::decode(&details.details[0].value[..]).unwrap();
    assert_eq!(
        retry.retry_delay,
        Some(ProtoDuration {
            seconds: 60,
            nanos: 0
        })
    );
    // Another tenant is not limited; calls without the metadata key share
    // one tenant's limit.
    assert!(client.allow(allow(&[("x-tenant", "b")])).await.is_ok());
    for _ in 0..2 {
        assert!(client.allow(allow(&[])).await.is_ok());
    }
    let status = client.allow(allow(&[])).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
}

#[tokio::test]
async fn a_critical_call_evicts_a_queued_not_critical_one() {
    let clock = ManualClock::new();
    // One unit of queue, released one per second of the manual clock;
    // callers on this machine may say their criticality.
    let throttler = Throttler::builder()
        .clock(clock.clone())
        .criticality_header(
            "x-criticality",
            Trust::networks(["127.0.0.0/8", "::1"]).unwrap(),
        )
        .queue(1, RateSpec::new(1.0).unwrap())
        .build();
    let client = QuotaServiceClient::connect(serve(throttler.clone()).await)
        .await
        .unwrap();
    let call = |metadata: &'static [(&'static str, &'static str)]| {
        let mut c = client.clone();
        tokio::spawn(async move { c.allow(allow(metadata)).await })
    };
    let queued = |n: usize| {
        let (_, len) = throttler_queue(&throttler);
        len == n
    };

    // The first passes the idle queue; the second waits in it.
    call(&[]).await.unwrap().unwrap();
    let waiting = call(&[("x-criticality", "NOT_CRITICAL")]);
    while !queued(1) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Full: another NOT_CRITICAL call is refused at once.
    let full = call(&[("x-criticality", "NOT_CRITICAL")])
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(full.code(), Code::Unavailable);
    assert_eq!(full.message(), "admission queue full");
    assert_eq!(full.metadata().get("retry-after").unwrap(), "1");
    let details = RpcStatus::decode(full.details()).unwrap();
    let retry = RetryInfo::decode(&details.details[0].value[..]).unwrap();
    assert_eq!(retry.retry_delay.unwrap().seconds, 1);
    // A CRITICAL call evicts the queued one, which is answered at once.
    let critical = call(&[("x-criticality", "CRITICAL")]);
    let evicted = waiting.await.unwrap().unwrap_err();
    assert_eq!(evicted.code(), Code::Unavailable);
    assert_eq!(
        evicted.message(),
        "evicted from the admission queue by a critical request"
    );
    assert!(!critical.is_finished());
    // Its turn comes when the queue's clock reaches 1 s.
    clock.advance(Duration::from_secs(1));
    assert_eq!(critical.await.unwrap().unwrap().get_ref().tokens_granted, 1);
}

/// The queue's waiting cost and length, read from the throttler's metrics.
fn throttler_queue(t: &Throttler) -> (u64, usize) {
    let families = t.registry().gather();
    let gauge = |name: &str| {
        families
            .iter()
            .find(|f| f.name() == name)
            .map_or(0.0, |f| f.get_metric()[0].get_gauge().get_value())
    };
    (
        gauge("tollgate_throttle_queued_cost") as u64,
        gauge("tollgate_throttle_queued_requests") as usize,
    )
}
