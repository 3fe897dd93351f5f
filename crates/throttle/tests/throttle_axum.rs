//! End to end: an axum server on 127.0.0.1:0 behind the throttle layer,
//! driven over real TCP with plain HTTP/1.1 requests.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Request, Response};
use axum::{routing::get, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate_throttle::{
    CostMeter, CostModel, Extract, FixedWindow, Limit, RequestHead, Rule, ThrottleLayer, Throttler,
    TokenPool,
};

use tollgate::ManualClock;
use tollgate_testkit::logs::Logs;
use tower::{Layer, ServiceExt};

fn window(limit: u64) -> Limit {
    Limit::FixedWindow(FixedWindow::new(limit, Duration::from_secs(3600)).unwrap())
}

async fn serve(throttler: Throttler) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(ThrottleLayer::new(throttler));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// As `serve`, but as a newcomer might: without connect info.
async fn serve_plain(throttler: Throttler) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(ThrottleLayer::new(throttler));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A throttler on a frozen clock, with no rules, that predicts a request's
/// cost from those measured for its method and path (1 for a new one).
fn cost_predicting() -> Throttler {
    Throttler::builder()
        .clock(ManualClock::new())
        .cost(CostModel::Predicted {
            class: Extract::method_and_path(),
            default: 1,
        })
        .build()
}

/// Sends one request; returns the status and the lowercased head.
async fn get_with(addr: SocketAddr, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = String::from("GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out.to_ascii_lowercase())
}

#[tokio::test]
async fn throttles_per_api_key_and_per_ip_over_tcp() {
    let throttler = Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), window(2)).soft(window(1)))
        .rule(Rule::new("per-ip", Extract::peer_ip(), window(5)))
        .build();
    let addr = serve(throttler.clone()).await;

    let (status, head) = get_with(addr, &[("x-api-key", "a")]).await;
    assert_eq!(status, 200);
    assert!(head.ends_with("hello"));
    assert!(!head.contains("ratelimit-warning"));
    // Over the soft limit: admitted with a warning.
    let (status, head) = get_with(addr, &[("x-api-key", "a")]).await;
    assert_eq!(status, 200);
    assert!(head.contains("ratelimit-limit: 2\r\n"), "{head}");
    assert!(head.contains("ratelimit-remaining: 0\r\n"));
    assert!(head.contains("ratelimit-warning: soft limit of rule \"per-key\" exceeded"));
    // Over the hard limit: 429 with a retry-after, and the handler is not run.
    let (status, head) = get_with(addr, &[("x-api-key", "a")]).await;
    assert_eq!(status, 429);
    assert!(head.contains("retry-after: "), "{head}");
    assert!(!head.ends_with("hello"));
    // Other keys pass until the peer IP's limit of 5 admitted requests.
    assert_eq!(get_with(addr, &[("x-api-key", "b")]).await.0, 200);
    assert_eq!(get_with(addr, &[("x-api-key", "c")]).await.0, 200);
    assert_eq!(get_with(addr, &[("x-api-key", "d")]).await.0, 200);
    let (status, _) = get_with(addr, &[("x-api-key", "e")]).await;
    assert_eq!(status, 429);

    // A gRPC request gets a trailers-only RESOURCE_EXHAUSTED.
    let (status, head) = get_with(
        addr,
        &[("x-api-key", "f"), ("content-type", "application/grpc")],
    )
    .await;
    assert_eq!(status, 200);
    assert!(head.contains("grpc-status: 8\r\n"), "{head}");
    assert!(head.contains("grpc-message: rate limited by rule \"per-ip\""));
}

#[tokio::test]
async fn the_measured_cost_is_the_meter_summed_over_the_inner_polls_only() {
    // A fake CPU clock in nanoseconds.
    let cpu = Arc::new(AtomicU64::new(0));
    let throttler = cost_predicting();
    let (release, released) = oneshot::channel::<()>();
    let released = Arc::new(Mutex::new(Some(released)));
    let work = cpu.clone();
    let read = cpu.clone();
    let service = ThrottleLayer::new(throttler.clone())
        .cost_meter(CostMeter::custom(move || {
            Duration::from_nanos(read.load(Ordering::SeqCst))
        }))
        .layer(tower::service_fn(move |_: Request<()>| {
            let released = released.lock().unwrap().take();
            let work = work.clone();
            async move {
                // 5 ms of work in the first poll, then a wait, then 3 ms.
                work.fetch_add(5_000_000, Ordering::SeqCst);
                if let Some(released) = released {
                    let _ = released.await;
                }
                work.fetch_add(3_000_000, Ordering::SeqCst);
                Ok::<_, Infallible>(Response::new(String::new()))
            }
        }));
    let req = || Request::builder().uri("/work").body(()).unwrap();
    let call = tokio::spawn(service.oneshot(req()));
    while cpu.load(Ordering::SeqCst) < 5_000_000 {
        tokio::task::yield_now().await;
    }
    // 100 ms spent elsewhere while the request waits: not its cost.
    cpu.fetch_add(100_000_000, Ordering::SeqCst);
    release.send(()).unwrap();
    call.await.unwrap().unwrap();
    // Measured 8 ms, in the default unit of 1 ms: the class now predicts 8.
    let r = req();
    assert_eq!(throttler.check(&RequestHead::of(&r)).unwrap().cost(), 8);
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[tokio::test]
async fn thread_cpu_time_charges_a_handler_s_work_and_not_its_waits() {
    let throttler = cost_predicting();
    // The default meter: thread CPU time, in milliseconds.
    let service = ThrottleLayer::new(throttler.clone()).layer(tower::service_fn(
        |req: Request<()>| async move {
            if req.uri().path() == "/burn" {
                // At least 3 ms of this thread's CPU, whatever the load.
                let start = thread_cpu();
                let mut x = 0u64;
                while thread_cpu() - start < Duration::from_millis(3) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            } else {
                // 50 ms of waiting and almost no CPU.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, Infallible>(Response::new(String::new()))
        },
    ));
    let req = |path: &str| Request::builder().uri(path).body(()).unwrap();
    service.clone().oneshot(req("/burn")).await.unwrap();
    service.oneshot(req("/wait")).await.unwrap();
    let burn = req("/burn");
    let burnt = throttler.check(&RequestHead::of(&burn)).unwrap().cost();
    assert!(burnt >= 3, "{burnt}");
    let wait = req("/wait");
    let waited = throttler.check(&RequestHead::of(&wait)).unwrap().cost();
    assert!(waited < 50, "{waited}");
}

#[tokio::test]
async fn a_per_ip_rule_served_without_connect_info_still_limits_and_says_why() {
    let logs = Logs::default();
    let subscriber = logs.subscriber();
    let _guard = tracing::subscriber::set_default(subscriber);
    let throttler = Throttler::builder()
        .rule(Rule::new("per-ip", Extract::peer_ip(), window(2)))
        .build();
    let addr = serve_plain(throttler).await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(get_with(addr, &[]).await.0);
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429, 429, 429]);
    assert_eq!(logs.count("can find no key"), 1, "{}", logs.text());
    assert!(logs
        .text()
        .contains("into_make_service_with_connect_info::<SocketAddr>()"));
}

#[tokio::test]
async fn ratelimit_fields_on_admitted_and_refused_responses() {
    let throttler = Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new(
                "per-key",
                Extract::header("x-api-key"),
                Limit::TokenPool(TokenPool::new("5".parse().unwrap()).with_burst(3).unwrap()),
            )
            .ratelimit_headers(true),
        )
        .rule(Rule::new(
            "hourly",
            Extract::header("x-api-key"),
            window(100),
        ))
        .build();
    let addr = serve(throttler).await;
    // A bucket of 3 at 5/s: it refills its quota in 600 ms (w=1), and after
    // one request lacks one op for 200 ms (t=1).
    let (status, head) = get_with(addr, &[("x-api-key", "a")]).await;
    assert_eq!(status, 200);
    assert!(
        head.contains("ratelimit-policy: \"per-key\";q=3;w=1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("ratelimit: \"per-key\";r=2;t=1\r\n"),
        "{head}"
    );
    // Only the rule with headers on shows.
    assert!(!head.contains("hourly"), "{head}");
    get_with(addr, &[("x-api-key", "a")]).await;
    get_with(addr, &[("x-api-key", "a")]).await;
    let (status, head) = get_with(addr, &[("x-api-key", "a")]).await;
    assert_eq!(status, 429);
    assert!(head.contains("retry-after: 1\r\n"), "{head}");
    assert!(
        head.contains("ratelimit: \"per-key\";r=0;t=1\r\n"),
        "{head}"
    );
    assert!(head.contains("ratelimit-policy: \"per-key\";q=3;w=1\r\n"));
}

#[tokio::test]
async fn a_refusal_by_a_later_rule_shows_the_earlier_rule_refunded() {
    let throttler = Throttler::builder()
        .clock(ManualClock::new())
        .rule(
            Rule::new(
                "per-key",
                Extract::header("x-api-key"),
                Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(60)).unwrap()),
            )
            .ratelimit_headers(true),
        )
        .rule(Rule::new(
            "gate",
            Extract::header("x-gate"),
            Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(60)).unwrap()),
        ))
        .build();
    let addr = serve(throttler).await;
    let both = [("x-api-key", "k"), ("x-gate", "g")];
    let (status, head) = get_with(addr, &both).await;
    assert_eq!(status, 200);
    assert!(
        head.contains("ratelimit: \"per-key\";r=9;t=60\r\n"),
        "{head}"
    );
    // The gate refuses; the key's charge was refunded: still 9.
    let (status, head) = get_with(addr, &both).await;
    assert_eq!(status, 429);
    assert!(
        head.contains("ratelimit: \"per-key\";r=9;t=60\r\n"),
        "{head}"
    );
    let (status, head) = get_with(addr, &[("x-api-key", "k"), ("x-gate", "h")]).await;
    assert_eq!(status, 200);
    assert!(
        head.contains("ratelimit: \"per-key\";r=8;t=60\r\n"),
        "{head}"
    );
}
