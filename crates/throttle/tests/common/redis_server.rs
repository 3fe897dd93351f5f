//! The real `redis-server` the Redis tests run: see `tollgate_testkit::redis`.

// Not every test uses the Cluster.
#[allow(unused_imports)]
pub(crate) use tollgate_testkit::redis::{RedisCluster, RedisServer};
