"""Every repr reads as Python: quoted strings, None, floats as Python
writes them; never Rust's Debug (`Some(..)`, `ClientTls { .. }`)."""

import re

import tollgate
from test_lease import wait_for_source

RUST = re.compile(r'Some\(|None\)|\{|"|::')


def python_like(text: str) -> str:
    assert not RUST.search(text.replace("None)", "")), text
    return text


def test_limiter_bucket_and_stats_reprs():
    limiter = tollgate.RateLimiter("10K,1.5", fill_interval=0.005)
    assert python_like(repr(limiter)) == "RateLimiter('10K,1.5', fill_interval=0.005, max_backlog=None)"
    limiter.max_backlog = 0.25
    assert repr(limiter).endswith("max_backlog=0.25)")
    assert python_like(repr(limiter.stats())) == "Stats(admitted=0, total_wait=0.0, backlog=0.0)"
    bucket = tollgate.TokenBucket("100", size=200, max_debt=1, max_wait=0.5)
    assert python_like(repr(bucket)) == "TokenBucket('100,1.1', size=200, max_debt=1.0, max_wait=0.5)"


def test_lease_reprs_before_and_after_a_lease(doorman):
    with tollgate.LeaseClient([doorman.address], client_id="me") as client:
        assert python_like(repr(client)) == f"LeaseClient([{doorman.address!r}], client_id='me')"
        resource = client.resource("api", 500, expiry="pessimistic")
        pending = resource.current()
        assert python_like(repr(pending)) == (
            "Capacity(capacity=0.0, source='pending', lease_capacity=None, expiry=None, "
            "refresh_interval=None, safe_capacity=None, refreshes=0)"
        )
        assert python_like(repr(resource)) in (
            "Resource('api', capacity=0.0, source='pending')",
            "Resource('api', capacity=100.0, source='lease')",
        )
        state = wait_for_source(resource, "lease")
        text = python_like(repr(state))
        assert text.startswith("Capacity(capacity=100.0, source='lease', lease_capacity=100.0, expiry=")
        assert f"expiry={state.expiry!r}" in text
        assert "refresh_interval=1.0, safe_capacity=7.0, refreshes=" in text
        assert python_like(repr(resource)) == "Resource('api', capacity=100.0, source='lease')"
        limiter = client.rate_limiter("pace", 5, expiry="optimistic")
        assert python_like(repr(limiter)).startswith("LeasedRateLimiter('pace', capacity=5.0, source=")


def test_quota_reprs(dead_address):
    client = tollgate.QuotaClient(dead_address, "svc", "b", fallback_rate="1K", deadline=0.5)
    assert python_like(repr(client)) == f"QuotaClient({dead_address!r}, 'svc', 'b', fallback_rate='1K,1.1', deadline=0.5)"
    granted = client.allow()
    assert python_like(repr(granted)) == "Granted(source='fallback', wait=0.0)"
