//! What the tollgate crates' tests share, in one home: a dev-dependency
//! only, never published.
//!
//! * [`logs`]: log output captured for a test to read;
//! * [`etcd`]: a real etcd started for a test on free ports;
//! * [`net`]: listeners and dead addresses on loopback;
//! * [`process`]: a `tollgate` process started for a test, its output read
//!   as it comes;
//! * [`redis`]: a real `redis-server` on a free port (with TLS, a Cluster
//!   of them, or a master and its Sentinel), the tests' own commands to
//!   it, fresh key prefixes, and the one-line start-up errors a store
//!   must give;
//! * [`fixtures`]: the Doorman resource templates the tests write alike;
//! * [`ask`]: the Doorman requests the tests send;
//! * `lease` (feature `lease`): an in-process Doorman lease server and the
//!   GetCapacity requests the tests send it.
//!
//! The Doorman crate's own tests take the kit without `lease`, so that the
//! kit never turns the server on in the Doorman crate's lease-client-alone
//! build (`--no-default-features`).

pub mod ask;
pub mod etcd;
pub mod fixtures;
#[cfg(feature = "lease")]
pub mod lease;
pub mod logs;
pub mod net;
pub mod process;
pub mod redis;
