"""The `*_async` methods return real coroutines: `asyncio.create_task`,
`ensure_future` and `asyncio.run` take them, and one never awaited takes
nothing."""

import asyncio
import inspect

import pytest

import tollgate
from conftest import PATIENCE


def test_every_async_method_is_a_coroutine_that_create_task_takes(quota, dead_address):
    async def main():
        limiter = tollgate.RateLimiter("1K")
        quota_client = tollgate.QuotaClient(quota.address, "svc", "big", fallback_rate=1, deadline=PATIENCE)
        with tollgate.LeaseClient([dead_address], rpc_timeout=0.5) as client:
            leased = client.rate_limiter("hopeful", 1000, expiry="optimistic")
            calls = [
                limiter.acquire_async(),
                limiter.acquire_async(2),
                leased.acquire_async(),
                quota_client.allow_async(),
                quota_client.admit_async(3),
            ]
            assert all(inspect.iscoroutine(c) and asyncio.iscoroutine(c) for c in calls)
            tasks = [asyncio.create_task(c) for c in calls[:3]]
            futures = [asyncio.ensure_future(c) for c in calls[3:]]
            done = await asyncio.wait_for(asyncio.gather(*tasks, *futures), PATIENCE)
            assert all(x >= 0 for x in done[:3])
            assert [g.source for g in done[3:]] == ["service", "service"]

    asyncio.run(main())


def test_a_task_that_waits_is_served_and_one_cancelled_takes_nothing():
    async def main():
        limiter = tollgate.RateLimiter("0.001,1.0")  # one op on hand, the next in 1,000 s
        first = asyncio.create_task(limiter.acquire_async())
        assert await asyncio.wait_for(first, PATIENCE) >= 0
        waiting = asyncio.create_task(limiter.acquire_async())
        await asyncio.sleep(0)  # it starts, and queues
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert limiter.stats().admitted == 1
        assert not limiter.try_acquire()

    asyncio.run(main())


def test_a_coroutine_starts_when_run_and_not_before():
    limiter = tollgate.RateLimiter("0.001,1.0")
    never = limiter.acquire_async()  # outside any event loop: fine, nothing starts
    never.close()
    assert limiter.stats().admitted == 0
    # asyncio.run takes the coroutine itself.
    assert asyncio.run(limiter.acquire_async()) >= 0
    assert limiter.stats().admitted == 1
    assert not limiter.try_acquire()
