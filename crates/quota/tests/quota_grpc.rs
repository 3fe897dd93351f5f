//! The quota service on the wire: golden bytes encoded by hand from the
//! reference's field table, Allow over real gRPC on 127.0.0.1:0, the JSON
//! Allow and metrics on the debug port, and reload from a file.

#[path = "common/grpc_answer.rs"]
mod grpc_answer;

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tollgate::ManualClock;
use tollgate_quota::pb::quota_service_client::QuotaServiceClient;
use tollgate_quota::pb::{allow_response, AllowRequest, AllowResponse};
use tollgate_quota::{reload_config, serve_http, Quota, QuotaConfig, QuotaLimits, QuotaServer};

#[path = "common/http1.rs"]
mod http1;
use tollgate_testkit::logs::Logs;

use http1::http;

/// namespace = 1 (string), bucket_name = 2 (string), tokens_requested = 3
/// (int64), max_wait_millis_override = 4 (int64), max_wait_time_override = 5
/// (bool): tags are (field << 3) | wire type, 2 for strings, 0 for varints.
const REQUEST: &[u8] = &[
    0x0a, 0x02, b'n', b's', // 1: "ns"
    0x12, 0x01, b'b', // 2: "b"
    0x18, 0x03, // 3: 3
    0x20, 0xfa, 0x01, // 4: 250 = 0b1_1111010 -> 0xfa 0x01
    0x28, 0x01, // 5: true
];

/// tokens_requested = -1: an int64 varint of ten bytes.
const NEGATIVE: &[u8] = &[
    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
];

/// status = 0 (OK) is the default and not sent; tokens_granted = 2 (int64)
/// = 3; wait_millis = 3 (int64) = 100.
const OK_RESPONSE: &[u8] = &[0x10, 0x03, 0x18, 0x64];
/// status = 1 (enum) = REJECTED_TIMEOUT.
const TIMEOUT_RESPONSE: &[u8] = &[0x08, 0x01];
/// status = 6 = REJECTED_SERVER_ERROR, the last value.
const SERVER_ERROR_RESPONSE: &[u8] = &[0x08, 0x06];

#[test]
fn golden_bytes_match_the_field_table() {
    let req = AllowRequest {
        namespace: "ns".into(),
        bucket_name: "b".into(),
        tokens_requested: 3,
        max_wait_millis_override: 250,
        max_wait_time_override: true,
    };
    assert_eq!(req.encode_to_vec(), REQUEST);
    assert_eq!(AllowRequest::decode(REQUEST).unwrap(), req);
    let neg = AllowRequest::decode(NEGATIVE).unwrap();
    assert_eq!(neg.tokens_requested, -1);
    assert_eq!(neg.encode_to_vec(), NEGATIVE);

    let ok = AllowResponse {
        status: allow_response::Status::Ok as i32,
        tokens_granted: 3,
        wait_millis: 100,
    };
    assert_eq!(ok.encode_to_vec(), OK_RESPONSE);
    assert_eq!(AllowResponse::decode(OK_RESPONSE).unwrap(), ok);
    let timeout = AllowResponse::decode(TIMEOUT_RESPONSE).unwrap();
    assert_eq!(timeout.status(), allow_response::Status::RejectedTimeout);
    let last = AllowResponse::decode(SERVER_ERROR_RESPONSE).unwrap();
    assert_eq!(last.status(), allow_response::Status::RejectedServerError);
    let names = [
        (0, "OK"),
        (1, "REJECTED_TIMEOUT"),
        (2, "REJECTED_NO_BUCKET"),
        (3, "REJECTED_TOO_MANY_BUCKETS"),
        (4, "REJECTED_TOO_MANY_TOKENS_REQUESTED"),
        (5, "REJECTED_INVALID_REQUEST"),
        (6, "REJECTED_SERVER_ERROR"),
    ];
    for (n, name) in names {
        let s = allow_response::Status::try_from(n).unwrap();
        assert_eq!(s.as_str_name(), name);
        assert_eq!(tollgate_quota::Status::from(s).name(), name);
    }
    assert_eq!(
        tollgate_quota::pb::quota_service_server::SERVICE_NAME,
        "quotaservice.QuotaService"
    );
}

const CONFIG: &str = "\
namespaces:
  ns:
    buckets:
      b: {size: 3, fill_rate: 10, wait_timeout_millis: 1000}
  logins:
    max_dynamic_buckets: 2
    dynamic_bucket_template: {size: 1, fill_rate: 1}
";

async fn start(yaml: &str) -> (Arc<Quota>, ManualClock, String, String) {
    let clock = ManualClock::new();
    let quota = Arc::new(Quota::new(
        QuotaConfig::from_yaml(yaml).unwrap(),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(QuotaServer::builder(Arc::clone(&quota)).serve(listener, std::future::pending()));
    let dl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let daddr = dl.local_addr().unwrap().to_string();
    tokio::spawn(serve_http(Arc::clone(&quota), dl, std::future::pending()));
    (quota, clock, addr, daddr)
}

fn req(ns: &str, b: &str, tokens: i64) -> AllowRequest {
    AllowRequest {
        namespace: ns.into(),
        bucket_name: b.into(),
        tokens_requested: tokens,
        ..Default::default()
    }
}

#[tokio::test]
async fn allow_over_grpc() {
    let (_quota, clock, addr, _) = start(CONFIG).await;
    let client = QuotaServiceClient::connect(addr).await.unwrap();
    let call = |r: AllowRequest| {
        let mut c = client.clone();
        async move {
            let resp = c.allow(r).await.unwrap().into_inner();
            (resp.status(), resp.tokens_granted, resp.wait_millis)
        }
    };
    use allow_response::Status as S;
    assert_eq!(call(req("ns", "b", 3)).await, (S::Ok, 3, 0));
    // 0 tokens (the field unset) take one, borrowed, and are answered as
    // the reference answers them: 0 granted.
    assert_eq!(call(req("ns", "b", 0)).await, (S::Ok, 0, 0));
    // The override lowers the 1000 ms timeout to 50 ms: the 100 ms owed
    // are too long.
    let mut lowered = req("ns", "b", 1);
    lowered.max_wait_time_override = true;
    lowered.max_wait_millis_override = 50;
    assert_eq!(call(lowered.clone()).await, (S::RejectedTimeout, 0, 0));
    // Without the flag the override is ignored.
    lowered.max_wait_time_override = false;
    assert_eq!(call(lowered).await, (S::Ok, 1, 100));
    clock.advance(Duration::from_millis(300));
    assert_eq!(call(req("ns", "b", 1)).await, (S::Ok, 1, 0));
    // Bad input: the right status, never a gRPC error.
    assert_eq!(call(req("nope", "b", 1)).await, (S::RejectedNoBucket, 0, 0));
    assert_eq!(call(req("ns", "b:c", 1)).await, (S::RejectedNoBucket, 0, 0));
    assert_eq!(
        call(req("ns", &"b".repeat(257), 1)).await,
        (S::RejectedInvalidRequest, 0, 0)
    );
    assert_eq!(
        call(req("", "", 1)).await,
        (S::RejectedInvalidRequest, 0, 0)
    );
    assert_eq!(
        call(req("ns", "b", -5)).await,
        (S::RejectedInvalidRequest, 0, 0)
    );
    assert_eq!(
        call(req("ns", "b", i64::MAX)).await,
        (S::RejectedTooManyTokensRequested, 0, 0)
    );
    assert_eq!(call(req("logins", "u1", 1)).await, (S::Ok, 1, 0));
    assert_eq!(call(req("logins", "u2", 1)).await, (S::Ok, 1, 0));
    assert_eq!(
        call(req("logins", "u3", 1)).await,
        (S::RejectedTooManyBuckets, 0, 0)
    );
    // Raw golden bytes on the wire decode to the same request.
    let golden = AllowRequest::decode(NEGATIVE).unwrap();
    assert_eq!(call(golden).await, (S::RejectedInvalidRequest, 0, 0));
}

#[tokio::test]
async fn json_allow_and_metrics_on_the_debug_port() {
    let (_quota, _clock, _, daddr) = start(CONFIG).await;
    let post = |body: &'static str| {
        let daddr = daddr.clone();
        async move {
            let (code, body) = http(&daddr, "POST", "/api/allow", body).await;
            assert_eq!(code, 200, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        }
    };
    let ok_two = serde_json::json!({"status": "OK", "tokens_granted": 2, "wait_millis": 0});
    assert_eq!(
        post(r#"{"namespace":"ns","bucket_name":"b","tokens_requested":2}"#).await,
        ok_two
    );
    // One on hand, one borrowed: granted at once; the next caller owes
    // 100 ms, over its 50 ms.
    assert_eq!(
        post(r#"{"namespace":"ns","bucket_name":"b","tokens_requested":2,"max_wait_time_override":true,"max_wait_millis_override":50}"#).await,
        ok_two
    );
    let v = post(r#"{"namespace":"ns","bucket_name":"b","tokens_requested":1,"max_wait_time_override":true,"max_wait_millis_override":50}"#).await;
    assert_eq!(v["status"], "REJECTED_TIMEOUT");
    let (code, body) = http(&daddr, "POST", "/api/allow", "{not json").await;
    assert_eq!(code, 400);
    assert!(body.contains("REJECTED_INVALID_REQUEST"));
    let (code, body) = http(&daddr, "GET", "/api/buckets", "").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        serde_json::json!([{"namespace": "ns", "bucket_name": "b", "kind": "named", "live": true,
            "tokens_available": -1, "size": 3, "fill_rate": 10.0}])
    );
    let (code, body) = http(&daddr, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("tollgate_quota_requests_served_total{namespace=\"ns\",waited=\"false\"} 2")
    );
    assert!(body.contains("tollgate_quota_tokens_served_total{namespace=\"ns\"} 4"));
    assert!(body.contains("tollgate_quota_timeouts_total{namespace=\"ns\"} 1"));
    assert!(body.contains("tollgate_quota_buckets_created_total{namespace=\"ns\"} 1"));
}

/// `/api/buckets` lists the configured buckets not used yet (as they
/// would start: full) beside the live ones, and `/` is a status page
/// linking the endpoints and listing the same buckets.
#[tokio::test]
async fn the_bucket_list_and_the_status_page_show_configured_buckets_not_yet_used() {
    let (quota, _clock, _, daddr) = start(
        "global_default_bucket: {size: 9, fill_rate: 9}\n\
         namespaces:\n  \
           ns:\n    default_bucket: {size: 2, fill_rate: 2}\n    buckets:\n      \
             used: {size: 3, fill_rate: 10}\n      unused: {size: 4, fill_rate: 0.5}\n  \
           ips:\n    dynamic_bucket_template: {size: 1, fill_rate: 1}\n",
    )
    .await;
    assert_eq!(
        quota
            .allow(&tollgate_quota::AllowRequest::new("ns", "used", 1))
            .status,
        tollgate_quota::Status::Ok
    );
    assert_eq!(
        quota
            .allow(&tollgate_quota::AllowRequest::new("ips", "<10.0.0.1>", 1))
            .status,
        tollgate_quota::Status::Ok
    );
    let (code, body) = http(&daddr, "GET", "/api/buckets", "").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let row = |ns: &str, b: &str, kind: &str, live: bool, available: i64, size: u64, rate: f64| {
        serde_json::json!({"namespace": ns, "bucket_name": b, "kind": kind, "live": live,
            "tokens_available": available, "size": size, "fill_rate": rate})
    };
    assert_eq!(
        v,
        serde_json::json!([
            row(
                "___GLOBAL___",
                "___DEFAULT_BUCKET___",
                "global_default",
                false,
                9,
                9,
                9.0
            ),
            row("ips", "<10.0.0.1>", "dynamic", true, 0, 1, 1.0),
            row(
                "ns",
                "___DEFAULT_BUCKET___",
                "namespace_default",
                false,
                2,
                2,
                2.0
            ),
            row("ns", "unused", "named", false, 4, 4, 0.5),
            row("ns", "used", "named", true, 2, 3, 10.0),
        ])
    );
    let (code, page) = http(&daddr, "GET", "/", "").await;
    assert_eq!(code, 200);
    for link in ["/api/buckets", "/metrics", "/healthz", "/api/admin/config"] {
        assert!(
            page.contains(&format!("<a href=\"{link}\">")),
            "{link}: {page}"
        );
    }
    assert!(page.contains("<p>2 buckets live, 1 dynamic.</p>"), "{page}");
    assert!(
        page.contains("<tr><td>ns</td><td>unused</td><td>named</td><td>not yet used</td><td>4</td><td>4</td><td>0.5</td></tr>"),
        "{page}"
    );
    assert!(
        page.contains("<tr><td>ips</td><td>&lt;10.0.0.1&gt;</td><td>dynamic</td><td>yes</td><td>0</td><td>1</td><td>1</td></tr>"),
        "{page}"
    );
}

#[test]
fn reload_from_a_file_keeps_state_and_rejects_bad_files() {
    let dir = std::env::temp_dir().join(format!("tollgate-quota-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("quota.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    let clock = ManualClock::new();
    let quota = Quota::new(
        QuotaConfig::from_file(&path).unwrap(),
        QuotaLimits::default(),
        Arc::new(clock),
    );
    let r = tollgate_quota::AllowRequest::new("ns", "b", 3);
    assert_eq!(quota.allow(&r).wait_millis(), 0);
    std::fs::write(
        &path,
        "namespaces:\n  ns:\n    buckets:\n      b: {size: -1}\n",
    )
    .unwrap();
    // The log names what is wrong, not only that the file was refused:
    // here the bucket's size, then the YAML parser's complaint.
    let log = Logs::default();
    let writer = log.clone();
    let logger = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(logger, || {
        assert!(!reload_config(&quota, &path));
        std::fs::write(&path, "namespaces:\n  ns: [\n").unwrap();
        assert!(!reload_config(&quota, &path));
    });
    let logged = log.text();
    assert!(
        logged.contains(r#"namespace "ns": bucket "b": size: must be between 1 and"#),
        "{logged}"
    );
    assert!(
        logged.contains("error=invalid quota configuration YAML: ") && logged.contains("at line 2"),
        "{logged}"
    );
    std::fs::write(&path, CONFIG.replace("fill_rate: 10,", "fill_rate: 20,")).unwrap();
    assert!(reload_config(&quota, &path));
    // Still empty after the reload: one token borrowed at once, and the
    // next caller owes 50 ms at the new rate.
    let one = tollgate_quota::AllowRequest::new("ns", "b", 1);
    assert_eq!(quota.allow(&one).wait_millis(), 0);
    assert_eq!(quota.allow(&one).wait_millis(), 50);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One call spoken with raw HTTP/2: `chunks` are sent as separate DATA
/// frames a little apart; returns the `grpc-status` (from the trailers or a
/// trailers-only response) and the response's body.
async fn raw_call(
    send: &mut h2::client::SendRequest<bytes::Bytes>,
    path: &str,
    chunks: &[&[u8]],
) -> (String, Vec<u8>) {
    *send = send.clone().ready().await.unwrap();
    let req = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut stream) = send.send_request(req, chunks.is_empty()).unwrap();
    for (i, chunk) in chunks.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let last = i + 1 == chunks.len();
        stream
            .send_data(bytes::Bytes::copy_from_slice(chunk), last)
            .unwrap();
    }
    let (http, status, data) = grpc_answer::read_answer(response).await.unwrap();
    assert_eq!(http, 200);
    (status, data)
}

/// A gRPC length prefix: not compressed, then the length, big-endian.
fn prefix(len: u32) -> Vec<u8> {
    let mut p = vec![0];
    p.extend_from_slice(&len.to_be_bytes());
    p
}

#[tokio::test]
async fn the_lean_server_reads_split_messages_and_refuses_what_it_cannot_answer() {
    let (_quota, _clock, addr, _) = start(CONFIG).await;
    let tcp = tokio::net::TcpStream::connect(addr.trim_start_matches("http://"))
        .await
        .unwrap();
    let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let allow = "/quotaservice.QuotaService/Allow";
    let head = prefix(REQUEST.len() as u32);

    // One message over three DATA frames: the prefix split, then the body.
    let (status, body) = raw_call(&mut send, allow, &[&head[..2], &head[2..], REQUEST]).await;
    assert_eq!(status, "0");
    assert_eq!(&body[..5], &prefix(body.len() as u32 - 5)[..]);
    // ns/b holds 3 tokens: the 3 asked are granted at once.
    assert_eq!(
        AllowResponse::decode(&body[5..]).unwrap(),
        AllowResponse {
            status: 0,
            tokens_granted: 3,
            wait_millis: 0
        }
    );

    // Errors are gRPC statuses, trailers-only, never a broken connection.
    let whole: Vec<u8> = head.iter().chain(REQUEST).copied().collect();
    let unknown = "/quotaservice.QuotaService/Nope";
    assert_eq!(
        raw_call(&mut send, unknown, &[&whole]).await,
        ("12".into(), vec![])
    );
    let mut compressed = whole.clone();
    compressed[0] = 1;
    assert_eq!(
        raw_call(&mut send, allow, &[&compressed]).await,
        ("12".into(), vec![])
    );
    let huge = prefix(u32::MAX);
    assert_eq!(
        raw_call(&mut send, allow, &[&huge]).await,
        ("8".into(), vec![])
    );
    // Past 16 KiB a request is refused before its body is read.
    let over = prefix(16 * 1024 + 1);
    assert_eq!(
        raw_call(&mut send, allow, &[&over]).await,
        ("8".into(), vec![])
    );
    let garbage: Vec<u8> = prefix(2).into_iter().chain([0xff, 0xff]).collect();
    assert_eq!(
        raw_call(&mut send, allow, &[&garbage]).await,
        ("13".into(), vec![])
    );
    let short = &whole[..whole.len() - 1];
    assert_eq!(
        raw_call(&mut send, allow, &[short]).await,
        ("13".into(), vec![])
    );
    assert_eq!(raw_call(&mut send, allow, &[]).await, ("13".into(), vec![]));

    // The connection still answers: 3 more borrowed at once...
    let (status, body) = raw_call(&mut send, allow, &[&whole]).await;
    assert_eq!(status, "0");
    assert_eq!(
        AllowResponse::decode(&body[5..]).unwrap().status(),
        allow_response::Status::Ok
    );
    // ...and then 300 ms are owed, beyond the request's 250 ms.
    let (status, body) = raw_call(&mut send, allow, &[&whole]).await;
    assert_eq!(status, "0");
    assert_eq!(
        AllowResponse::decode(&body[5..]).unwrap().status(),
        allow_response::Status::RejectedTimeout
    );
}

/// On its own threads too: calls are answered, and after the shutdown the
/// open connection is closed and `serve` returns.
#[tokio::test]
async fn the_lean_server_stops_on_shutdown() {
    let quota = Arc::new(Quota::new(
        QuotaConfig::from_yaml(CONFIG).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        QuotaServer::builder(quota)
            .threads(2)
            .serve(listener, async {
                let _ = stopped.await;
            }),
    );
    let mut clients = Vec::new();
    // Three connections over two threads: both threads serve.
    for _ in 0..3 {
        let mut client = QuotaServiceClient::connect(addr.clone()).await.unwrap();
        let resp = client.allow(req("ns", "b", 1)).await.unwrap().into_inner();
        assert_eq!(resp.status(), allow_response::Status::Ok);
        clients.push(client);
    }
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
