//! A quota service compatible with Square's quotaservice: before calling a
//! shared resource, a service asks "may I, and how long must I wait?" and
//! gets OK with a wait, or a rejection.
//!
//! Each bucket is a [`TokenBucket`](tollgate::TokenBucket): exact fixed-point
//! refill (a bucket polled every 99 ms still earns its full rate), rates
//! below one per second, debt up to a cap, and no thread per bucket. Buckets
//! are found in the design's order: the named bucket, the namespace's
//! default bucket, a dynamic bucket made from the namespace's template
//! (capped per namespace, removed when idle), the global default bucket.
//!
//! The parts: [`config`] (the reference's YAML format), [`names`] (name
//! rules), [`Registry`] (live buckets, reload, idle removal), [`Quota`]
//! (the Allow operation and its statuses), [`metrics`] (Prometheus),
//! [`reaper`] (the idle-removal task), [`reload`] (configuration hot
//! reload), and the two edges: [`grpc`] (`quotaservice.QuotaService/Allow`,
//! wire-compatible with the reference) and [`http`] (JSON Allow, bucket
//! listing and metrics on the debug port). [`client`] holds the naive and
//! smart clients and their tower layer; [`cluster`] shares each bucket's
//! rate between several quota servers through Doorman leases; [`admin`]
//! edits namespaces and buckets at run time, kept in the config file.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_quota::config::Config;
//! use tollgate_quota::{Limits, Quota, Request, Status};
//!
//! let config = Config::from_yaml("global_default_bucket: {size: 10, fill_rate: 5}\n")?;
//! let quota = Quota::new(config, Limits::default(), Arc::new(tollgate::SystemClock::new()));
//! let decision = quota.allow(&Request::new("any_namespace", "any_bucket", 3));
//! assert_eq!((decision.status, decision.tokens_granted), (Status::Ok, 3));
//! # Ok::<(), tollgate_quota::config::ConfigError>(())
//! ```

pub mod admin;
pub mod client;
pub mod cluster;
pub mod config;
pub mod etcd;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod names;
#[doc(hidden)]
pub mod pb;
pub mod reaper;
mod registry;
pub mod reload;
mod service;

pub use registry::{resolve, Kind, Limits, Registry, Slot, TooManyBuckets};
pub use service::{Decision, Quota, Request, Status};
