//! A real server on 127.0.0.1 with a manual clock behind it, and a real
//! client.

#![allow(dead_code, unreachable_pub)]

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_rls::pb::rate_limit_response::{self, rate_limit::Unit, Code, DescriptorStatus};
use tollgate_rls::pb::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::pb::{rate_limit_descriptor, RateLimitDescriptor, RateLimitRequest};
use tollgate_rls::{RateLimitService, RlsConfig, RlsServer, RlsSettings};
use tollgate_throttle::RedisStore;

pub(crate) use tollgate_testkit::redis::{fresh_prefix, RedisServer};

/// Where the servers a test starts keep their counters.
pub enum Store {
    /// In memory.
    Memory,
    /// In this Redis, each server on the test's manual clock.
    Redis(RedisServer),
}

thread_local! {
    /// The Redis of the test running on this thread, if any.
    static REDIS: RefCell<Option<String>> = const { RefCell::new(None) };
}

impl Store {
    /// A fresh `redis-server` on a free port.
    pub fn redis() -> Store {
        Store::Redis(RedisServer::start())
    }

    /// Runs `case` with every [`Server::start`] in it keeping its counters
    /// here (a `#[tokio::test]` runs on one thread).
    pub async fn run(self, case: impl Future<Output = ()>) {
        let url = match &self {
            Store::Memory => None,
            Store::Redis(r) => Some(r.url()),
        };
        REDIS.with(|r| *r.borrow_mut() = url);
        case.await;
        REDIS.with(|r| *r.borrow_mut() = None);
        drop(self);
    }
}

/// A store at `url` deciding on `clock`, its keys under `prefix`.
pub async fn redis_store(url: &str, prefix: &str, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(url)
        .prefix(prefix)
        .deadline(std::time::Duration::from_secs(2))
        .clock(clock.clone())
        .connect()
        .await
        .unwrap()
}

/// A service counting `limits` (YAML) in `store`, on `clock`: one replica
/// of several on one Redis.
pub fn replica_of(store: RedisStore, limits: &str, clock: &ManualClock) -> Arc<RateLimitService> {
    let config = RlsConfig::from_yaml("limits.yaml", limits).unwrap();
    let service = RateLimitService::new(
        Some(config),
        RlsSettings::default(),
        Arc::new(clock.clone()),
    );
    Arc::new(service.with_store(store).unwrap())
}

/// Tuesday 2023-11-14 22:14:00 UTC: on a minute boundary.
pub const T: u64 = 1_700_000_040;

pub struct Server {
    pub clock: ManualClock,
    pub client: RateLimitServiceClient<tonic::transport::Channel>,
    pub service: Arc<RateLimitService>,
    pub addr: String,
}

impl Server {
    /// Serves `yaml` (none: no configuration) with `settings`, the clock at
    /// Unix time `T`.
    pub async fn start(yaml: Option<&str>, settings: RlsSettings) -> Server {
        let config = yaml.map(|y| RlsConfig::from_yaml("config.yaml", y).unwrap());
        let clock = ManualClock::new();
        clock.set_ns(T * 1_000_000_000);
        let mut service = RateLimitService::new(config, settings, Arc::new(clock.clone()));
        if let Some(url) = REDIS.with(|r| r.borrow().clone()) {
            service = service
                .with_store(redis_store(&url, &fresh_prefix("rls"), &clock).await)
                .unwrap();
        }
        let service = Arc::new(service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(
            RlsServer::builder(Arc::clone(&service)).serve(listener, std::future::pending()),
        );
        let client = RateLimitServiceClient::connect(addr.clone()).await.unwrap();
        Server {
            clock,
            client,
            service,
            addr,
        }
    }

    /// Sets the clock to `T + secs`.
    pub fn at(&self, secs: u64) {
        self.clock.set_ns((T + secs) * 1_000_000_000);
    }

    pub async fn call(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits_addend: u32,
    ) -> Result<tollgate_rls::pb::RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(RateLimitRequest {
                domain: domain.to_owned(),
                descriptors,
                hits_addend,
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// One call that must be answered.
    pub async fn ok(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits_addend: u32,
    ) -> tollgate_rls::pb::RateLimitResponse {
        self.call(domain, descriptors, hits_addend).await.unwrap()
    }
}

/// A descriptor of `entries`.
pub fn d(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| rate_limit_descriptor::Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

/// `d` with its own hits_addend.
pub fn dh(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..d(entries)
    }
}

/// `d` with a limit override.
pub fn dl(entries: &[(&str, &str)], rpu: u32, unit: i32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: rpu,
            unit,
        }),
        ..d(entries)
    }
}

/// A status: code, `(rpu, unit, name)` when a limit applies, remaining,
/// reset seconds when present.
pub fn st(
    code: Code,
    limit: Option<(u32, Unit, &str)>,
    remaining: u32,
    reset: Option<i64>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: limit.map(|(rpu, unit, name)| rate_limit_response::RateLimit {
            name: name.to_owned(),
            requests_per_unit: rpu,
            unit: unit as i32,
        }),
        limit_remaining: remaining,
        duration_until_reset: reset.map(|seconds| prost_types::Duration { seconds, nanos: 0 }),
    }
}

/// The status of a descriptor no limit applies to.
pub fn none() -> DescriptorStatus {
    st(Code::Ok, None, 0, None)
}

pub fn ok(limit: (u32, Unit, &str), remaining: u32, reset: i64) -> DescriptorStatus {
    st(Code::Ok, Some(limit), remaining, Some(reset))
}

pub fn over(limit: (u32, Unit, &str), reset: i64) -> DescriptorStatus {
    st(Code::OverLimit, Some(limit), 0, Some(reset))
}
