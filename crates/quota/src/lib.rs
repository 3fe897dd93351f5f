//! A quota service compatible with Square's quotaservice: before calling a
//! shared resource, a service asks "may I, and how long must I wait?" and
//! gets OK with a wait, or a rejection.
//!
//! A client asks a quota server (`tollgate quota --config quotas.yaml`,
//! or the reference's) before each call to the shared resource:
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate_quota::{AdmitSource, NaiveClient, NaiveOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Bucket "UserService" of namespace "Pinky_TheBrain" on the server at
//! // 127.0.0.1:15100; 100 a second from a local limiter while the server
//! // cannot be reached.
//! let options = NaiveOptions::new("100".parse()?).deadline(Duration::from_millis(20));
//! let client = NaiveClient::new("127.0.0.1:15100", "Pinky_TheBrain", "UserService", options)?;
//! match client.allow(1).await {
//!     Ok(granted) => {
//!         // Granted, perhaps on credit: wait before using the token.
//!         tokio::time::sleep(granted.wait).await;
//!         if granted.source == AdmitSource::Fallback {
//!             eprintln!("the quota server did not answer: the local limit admitted it");
//!         }
//!         // ... call the shared resource ...
//!     }
//!     Err(denied) => eprintln!("not now: {denied}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`SmartClient`] takes tokens in batches and hands them out locally, and
//! [`QuotaLayer`] puts either client in front of a tower service. The
//! decisions a server makes come from a [`Quota`], which also runs in
//! process:
//!
//! Each bucket is a [`TokenBucket`](tollgate::TokenBucket): exact fixed-point
//! refill (a bucket polled every 99 ms still earns its full rate), rates
//! below one per second, debt up to a cap, and no thread per bucket. Buckets
//! are found in the design's order: the named bucket, the namespace's
//! default bucket, a dynamic bucket made from the namespace's template
//! (capped per namespace, removed when idle), the global default bucket.
//!
//! The parts: [`QuotaConfig`] (the reference's YAML format, its names
//! checked), [`Registry`] (live buckets,
//! reload, idle removal), [`Quota`] (the Allow operation and its
//! [`Status`]es), [`QuotaMetrics`] (Prometheus), [`spawn_reaper`] (the
//! idle-removal task), [`spawn_config_reload`] (configuration hot reload),
//! and the two edges: `quotaservice.QuotaService/Allow`, wire-compatible
//! with the reference, and [`http_router`] (JSON Allow, bucket listing and
//! metrics on the debug port). [`QuotaServer`] assembles a whole server:
//! the Allow edge, and beside it as asked the debug port, the admin API,
//! idle reaping, reload and the cluster mode. [`NaiveClient`] and
//! [`SmartClient`] are the clients, [`QuotaLayer`] their tower layer;
//! [`run_cluster`] (and [`QuotaServer`], which gives the leases back on
//! shutdown) shares each bucket's rate between several quota
//! servers through Doorman leases; [`Admin`] edits namespaces and buckets at run
//! time, kept beside the config file ([`Overlay`], read with it by
//! [`load_config`]) or under an etcd key (the service kit's
//! [`EtcdKey`](tollgate_service::EtcdKey)).
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_quota::{AllowRequest, Quota, QuotaConfig, QuotaLimits, Status};
//!
//! let config = QuotaConfig::from_yaml("global_default_bucket: {size: 10, fill_rate: 5}\n")?;
//! let quota = Quota::new(config, QuotaLimits::default(), Arc::new(tollgate::SystemClock::new()));
//! let decision = quota.allow(&AllowRequest::new("any_namespace", "any_bucket", 3));
//! assert_eq!((decision.status, decision.tokens_granted), (Status::Ok, 3));
//! # Ok::<(), tollgate_quota::QuotaConfigError>(())
//! ```
//!
//! # Features
//!
//! | feature | default | what it builds |
//! |---------|---------|----------------|
//! | `wire`  | off     | `pb`: the messages and gRPC stubs generated from `proto/quotaservice/quotaservice.proto`, for tools and tests that speak the wire protocol themselves; `AllowService`: the Allow service as a tonic service, for a tonic router of one's own |

mod admin;
mod client;
mod cluster;
mod config;
mod grpc;
mod http;
mod metrics;
mod names;
mod overlay;
#[cfg(feature = "wire")]
pub mod pb;
#[cfg(not(feature = "wire"))]
mod pb;
mod reaper;
mod registry;
mod reload;
mod server;
mod service;
mod status;
mod store;

pub use admin::{router as admin_router, Admin, AdminError};
pub use client::{
    Admit, AdmitSource, Admitted, Denied, Granted, NaiveClient, NaiveOptions, QuotaLayer,
    QuotaLayerError, Quotaed, SmartClient, SmartOptions,
};
pub use cluster::{resource_id as cluster_resource_id, run as run_cluster, ClusterOptions};
pub use config::{
    BucketConfig, NamespaceConfig, QuotaConfig, QuotaConfigError, DEFAULT_BUCKET_NAME,
    GLOBAL_NAMESPACE,
};
#[cfg(feature = "wire")]
pub use grpc::AllowService;
pub use grpc::ALLOW_PATH;
pub use http::{router as http_router, serve as serve_http};
pub use metrics::{QuotaMetrics, UNKNOWN_NAMESPACE};
pub use overlay::{load as load_config, Overlay};
pub use reaper::spawn as spawn_reaper;
pub use registry::{resolve, BucketKind, QuotaLimits, Registry};
pub use reload::{reload as reload_config, spawn as spawn_config_reload};
pub use server::QuotaServer;
pub use service::{AllowRequest, Decision, Quota};
pub use status::Status;
#[doc(no_inline)]
pub use store::OnError;
pub use store::QuotaStore;
