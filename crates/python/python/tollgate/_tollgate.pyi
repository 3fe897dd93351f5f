"""Type stubs of the extension module built from crates/python/src."""

from os import PathLike
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Coroutine, Literal, Optional, Sequence, Type, Union

Spec = Union[str, float]
ExpiryMode = Literal["safe", "optimistic", "pessimistic"]

class TollgateError(Exception):
    """The base of the errors tollgate raises about servers and buckets."""

class LeaseError(TollgateError):
    """A lease server refused the client for good (``wait``, ``updates``), a
    release was not acknowledged, or a client or resource is closed."""

class QuotaDenied(TollgateError):
    """The quota service (or the local fallback) refused the tokens."""

    status: Optional[str]
    """The service's status name (e.g. "REJECTED_TIMEOUT"); None for a local refusal."""

class BucketRefused(TollgateError):
    """A TokenBucket refused a reservation; nothing was taken."""

    refusal: Literal["max_wait", "max_debt", "too_large"]
    wait: float
    """Seconds: the wait refused (max_wait) or the debt's time (max_debt)."""
    limit: float
    """Seconds: the limit it ran into."""

class Stats:
    """A limiter's counters, taken at one moment."""

    admitted: int
    """Ops admitted since the limiter was made (weighted)."""
    total_wait: float
    """Sum over admitted ops of how late each started, seconds."""
    backlog: float
    """The backlog at the last fill, seconds."""

class RateLimiter:
    """Holds an op rate exactly and reports how late each op starts.

    ``RateLimiter("10K,1.1")``: 10,000 ops/s, catching up at up to 1.1x the
    rate after falling behind. A spec is ``<rate>[,<burst_ratio>][,<verb>]``
    (rates like ``12000``, ``1.5K``, ``10M``, ``1E6``, ``0.001``; verbs
    ``configure``, ``start``, ``restart``) or a number of ops/s. A bad spec,
    a negative or too large ``n`` and a ``fill_interval`` of 0 raise
    ValueError. Thread-safe; share one limiter.
    """

    def __init__(
        self,
        spec: Spec,
        *,
        max_backlog: Optional[float] = None,
        fill_interval: Optional[float] = None,
    ) -> None:
        """``max_backlog``: seconds of lateness kept at most. ``fill_interval``:
        how often time is added while callers wait (default: CPython's switch
        interval, ``sys.getswitchinterval()``, 0.005 s unless changed, at most
        0.005 s); longer costs less CPU per op, and ops start in larger
        bursts."""
    def acquire(self, n: int = 1) -> float:
        """Blocks until ``n`` ops may start (the GIL released); returns their
        lateness in seconds. Ctrl-C raises KeyboardInterrupt, taking nothing."""
    def try_acquire(self, n: int = 1) -> bool:
        """Takes ``n`` ops if they are there now; never waits."""
    def acquire_timeout(self, timeout: float, n: int = 1) -> float:
        """Like ``acquire``, waiting at most ``timeout`` seconds; raises
        TimeoutError, taking nothing, when the ops cannot start in time (at
        once when even the burst rate could not deliver them). Ctrl-C is
        noticed when it returns."""
    def acquire_async(self, n: int = 1) -> Coroutine[Any, Any, float]:
        """A coroutine that waits for ``n`` ops without blocking the event loop
        and returns the lateness in seconds: await it, or give it to
        ``asyncio.create_task``. It starts when first run; cancelling it takes
        nothing. A bad ``n`` raises ValueError at the call."""
    def apply(self, spec: Spec) -> None:
        """Applies a spec live (``configure``, ``start`` or ``restart``)."""
    @property
    def spec(self) -> str: ...
    @property
    def rate(self) -> float: ...
    @property
    def burst_ratio(self) -> float: ...
    @property
    def fill_interval(self) -> float:
        """How often time is added while callers wait, in seconds."""
    @property
    def backlog(self) -> float:
        """Seconds: how late an op admitted now starts."""
    @property
    def max_backlog(self) -> Optional[float]: ...
    @max_backlog.setter
    def max_backlog(self, cap: Optional[float]) -> None: ...
    def stats(self) -> Stats: ...

class TokenBucket:
    """"May I, and how long must I wait?" without blocking.

    ``TokenBucket("100", size=200, max_debt=1.0, max_wait=0.5)`` refills at
    100 tokens/s up to 200; a reservation beyond what is on hand borrows
    (later callers wait for the debt) up to ``max_debt`` seconds of debt.
    """

    def __init__(
        self,
        rate: Spec,
        *,
        size: Optional[int] = None,
        max_debt: float = 10.0,
        max_wait: float = 10.0,
    ) -> None: ...
    def reserve(self, n: int = 1, max_wait: Optional[float] = None) -> float:
        """Takes ``n`` tokens; returns the seconds to wait before using them.
        Raises BucketRefused, taking nothing; a negative ``n`` is a
        ValueError."""
    @property
    def available(self) -> int: ...
    @property
    def idle(self) -> float: ...
    @property
    def rate(self) -> float: ...
    @property
    def size(self) -> int: ...

class Tls:
    """TLS for a LeaseClient: the servers' CA, and for mutual TLS the
    client's certificate and key (PEM files), read and checked here: a
    missing file raises FileNotFoundError, one without a usable PEM
    certificate or key ValueError."""

    def __init__(
        self,
        ca: Union[str, PathLike[str]],
        *,
        cert: Union[str, PathLike[str], None] = None,
        key: Union[str, PathLike[str], None] = None,
        domain: Optional[str] = None,
    ) -> None: ...

class Capacity:
    """A resource's capacity state at one moment."""

    capacity: float
    source: Literal["pending", "lease", "expired"]
    lease_capacity: Optional[float]
    expiry: Optional[float]
    """When the last lease expires, Unix time in seconds."""
    refresh_interval: Optional[float]
    safe_capacity: Optional[float]
    refreshes: int

class CapacityUpdates(AsyncIterator[Capacity]):
    def __aiter__(self) -> CapacityUpdates: ...
    def __anext__(self) -> Awaitable[Capacity]: ...

class Resource:
    """A resource a LeaseClient holds a lease on."""

    @property
    def id(self) -> str: ...
    @property
    def capacity(self) -> float:
        """The capacity to use now: the lease's, or the expiry mode's."""
    def current(self) -> Capacity: ...
    @property
    def last_error(self) -> Optional[str]:
        """Why the client's last refresh failed (server and error), or None."""
    def set_wants(self, wants: float) -> None: ...
    def wait(self, timeout: Optional[float] = None) -> Optional[Capacity]:
        """Blocks until the state changes; None after ``timeout`` seconds
        without a change (``last_error`` says whether the servers are failing).
        Raises LeaseError at once when every server of the client has refused
        it in a way no retry can fix (a server of another kind, a refused
        request or certificate)."""
    def updates(self) -> CapacityUpdates:
        """``async for``: the state now, then every change, until released;
        raises LeaseError as ``wait`` does."""
    def release(self) -> None:
        """Releases and waits for the server; LeaseError if none answered."""
    def __enter__(self) -> Resource: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class LeasedRateLimiter:
    """A rate limiter whose rate (ops/s) is a lease's capacity."""

    @property
    def id(self) -> str: ...
    def acquire(self) -> float: ...
    def try_acquire(self) -> bool: ...
    def acquire_timeout(self, timeout: float) -> float: ...
    def acquire_async(self) -> Coroutine[Any, Any, float]: ...
    @property
    def capacity(self) -> float: ...
    def current(self) -> Capacity: ...
    @property
    def last_error(self) -> Optional[str]: ...
    def set_wants(self, wants: float) -> None: ...
    def stats(self) -> Stats: ...
    def wait(self, timeout: Optional[float] = None) -> Optional[Capacity]: ...
    def updates(self) -> CapacityUpdates: ...
    def release(self) -> None: ...
    def __enter__(self) -> LeasedRateLimiter: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class LeaseClient:
    """A client of Doorman lease servers (``tollgate serve``, Go Doorman).

    ``servers``: one ``host:port`` address or a list of them, checked here
    (ValueError). A client and what it hands out belong to the process that
    made them: in a forked child every use raises RuntimeError; make a new
    client there.
    """

    def __init__(
        self,
        servers: Union[str, Sequence[str]],
        *,
        tls: Optional[Tls] = None,
        client_id: Optional[str] = None,
        rpc_timeout: float = 5.0,
        min_refresh: float = 1.0,
    ) -> None: ...
    @property
    def id(self) -> str: ...
    @property
    def last_error(self) -> Optional[str]:
        """Why the last refresh failed (server and error), or None once one
        succeeds; such failures are retried with backoff."""
    def resource(
        self, id: str, wants: float, *, priority: int = 0, expiry: ExpiryMode = "safe"
    ) -> Resource: ...
    def rate_limiter(
        self,
        id: str,
        wants: float,
        *,
        priority: int = 0,
        expiry: ExpiryMode = "safe",
        max_backlog: float = 0.1,
    ) -> LeasedRateLimiter: ...
    def close(self) -> None:
        """Releases every resource still held, then stops the client."""
    def __enter__(self) -> LeaseClient: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Granted:
    """Tokens granted by a QuotaClient."""

    source: Literal["service", "fallback", "local"]
    wait: float
    """Seconds to wait before using the tokens (already waited, for admit)."""

class QuotaClient:
    """A client of one bucket of a quota service (``tollgate quota``,
    square's quotaservice), with a local fallback bucket.

    ``fallback_rate`` is required: the rate the client admits on its own
    while the service is slow, down or has no such bucket (no default suits
    every bucket). In a forked child every call raises RuntimeError.
    """

    def __init__(
        self,
        server: str,
        namespace: str,
        bucket: str,
        *,
        fallback_rate: Spec,
        deadline: float = 0.02,
    ) -> None: ...
    def allow(self, tokens: int = 1) -> Granted:
        """Takes the tokens; returns the wait to honour (not waited)."""
    def admit(self, tokens: int = 1) -> Granted:
        """``allow``, then waits the wait."""
    def allow_async(self, tokens: int = 1) -> Coroutine[Any, Any, Granted]: ...
    def admit_async(self, tokens: int = 1) -> Coroutine[Any, Any, Granted]: ...
    @property
    def timeouts(self) -> int: ...
    @property
    def fallbacks(self) -> int: ...
