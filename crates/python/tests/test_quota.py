"""QuotaClient against a real `tollgate quota`."""

import asyncio
import time

import pytest

import tollgate
from conftest import PATIENCE


def test_allow_is_granted_by_the_service(quota):
    client = tollgate.QuotaClient(quota.address, "svc", "big", fallback_rate=1, deadline=PATIENCE)
    granted = client.allow()
    assert (granted.source, granted.wait) == ("service", 0.0)
    assert client.allow(100).source == "service"
    assert (client.timeouts, client.fallbacks) == (0, 0)


def test_allow_hands_back_the_wait_and_admit_waits_it(quota):
    # Size 1 at 2/s: the first on hand, then each call borrows and is
    # told to wait for the debt before it, growing call by call (handed
    # back, not slept: three calls ask for more than a second of waits).
    client = tollgate.QuotaClient(quota.address, "svc", "slow", fallback_rate=1, deadline=PATIENCE)
    waits = [client.allow().wait for _ in range(4)]
    assert waits[0] == 0.0
    assert waits == sorted(waits) and waits[-1] >= 0.5
    start = time.monotonic()
    admitted = client.admit()
    assert admitted.source == "service" and admitted.wait > 0
    # It did wait: a sleep never ends early.
    assert time.monotonic() - start >= admitted.wait


def test_a_refusal_raises_quota_denied_with_the_status(quota):
    client = tollgate.QuotaClient(quota.address, "svc", "tight", fallback_rate=1, deadline=PATIENCE)
    client.allow()
    with pytest.raises(tollgate.QuotaDenied) as raised:
        client.allow()
    assert raised.value.status == "REJECTED_TIMEOUT"
    assert "REJECTED_TIMEOUT" in str(raised.value)
    assert isinstance(raised.value, tollgate.TollgateError)


def test_no_bucket_and_a_dead_service_use_the_fallback(quota, dead_address):
    client = tollgate.QuotaClient(quota.address, "svc", "unknown", fallback_rate="1K", deadline=PATIENCE)
    assert client.allow().source == "fallback"
    assert client.fallbacks == 1
    dead = tollgate.QuotaClient(dead_address, "svc", "big", fallback_rate=1000, deadline=0.5)
    assert dead.allow().source == "fallback"
    assert dead.timeouts >= 1
    # The fallback's own refusal is local: no status.
    tiny = tollgate.QuotaClient(dead_address, "svc", "big", fallback_rate="0.001", deadline=0.5)
    with pytest.raises(tollgate.QuotaDenied) as raised:
        for _ in range(5):
            tiny.admit()
    assert raised.value.status is None


def test_async_allow_and_admit(quota):
    async def main():
        client = tollgate.QuotaClient(quota.address, "svc", "big", fallback_rate=1, deadline=PATIENCE)
        granted = await asyncio.wait_for(
            asyncio.gather(*(client.allow_async() for _ in range(50))), PATIENCE
        )
        assert all(g.source == "service" for g in granted)
        admitted = await asyncio.wait_for(client.admit_async(3), PATIENCE)
        assert admitted.wait == 0.0
        tight = tollgate.QuotaClient(quota.address, "svc", "tight", fallback_rate=1, deadline=PATIENCE)
        await tight.allow_async()
        with pytest.raises(tollgate.QuotaDenied):
            await tight.allow_async()

    asyncio.run(main())


def test_bad_arguments(quota):
    with pytest.raises(ValueError):
        tollgate.QuotaClient(quota.address, "svc", "big", fallback_rate="lots")
    with pytest.raises(ValueError):
        tollgate.QuotaClient(quota.address, "svc", "big", fallback_rate=1, deadline=-1)
