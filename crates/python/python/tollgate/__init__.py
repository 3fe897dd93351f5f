"""tollgate for Python: exact, cheap rate limiting and Doorman capacity leases.

The classes come from tollgate's Rust crates (the extension module
``tollgate._tollgate``):

- ``RateLimiter("10K,1.1")``: holds an op rate exactly; ``acquire`` blocks
  with the GIL released and returns how late the op starts, ``acquire_async``
  is its asyncio form (a coroutine), ``try_acquire`` never waits.
- ``TokenBucket("100", size=200)``: "may I, and how long must I wait?"
  without blocking (``reserve``).
- ``LeaseClient(["doorman:15000"])``: capacity leases from Doorman servers,
  as ``Resource`` objects and as ``LeasedRateLimiter`` (a limiter fed by a
  lease).
- ``QuotaClient(server, namespace, bucket, fallback_rate="100")``: the quota
  service's Allow, with the wait to honour.
"""

from ._tollgate import (
    BucketRefused,
    Capacity,
    CapacityUpdates,
    Granted,
    LeaseClient,
    LeasedRateLimiter,
    LeaseError,
    QuotaClient,
    QuotaDenied,
    RateLimiter,
    Resource,
    Stats,
    Tls,
    TokenBucket,
    TollgateError,
)

__all__ = [
    "BucketRefused",
    "Capacity",
    "CapacityUpdates",
    "Granted",
    "LeaseClient",
    "LeasedRateLimiter",
    "LeaseError",
    "QuotaClient",
    "QuotaDenied",
    "RateLimiter",
    "Resource",
    "Stats",
    "Tls",
    "TokenBucket",
    "TollgateError",
]
