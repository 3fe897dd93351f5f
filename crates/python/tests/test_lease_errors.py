"""Why no lease comes: `wait` and `updates` raise LeaseError at once on an
error no retry can fix, and `last_error` names a failure the client keeps
retrying (a dead server), while `wait` returns None at its timeout."""

import asyncio
import time

import pytest

import tollgate
from conftest import PATIENCE
from test_lease import wait_for_source


def test_a_server_of_another_kind_raises_at_once_with_the_cause(quota):
    # `tollgate quota` serves the quota service, not Doorman's: no retry
    # can make it grant a lease.
    with tollgate.LeaseClient([quota.address], rpc_timeout=PATIENCE) as client:
        resource = client.resource("api", 10)
        with pytest.raises(tollgate.LeaseError) as raised:
            resource.wait(timeout=PATIENCE)
        message = str(raised.value)
        assert "no retry can fix it" in message
        assert quota.address in message and "Unimplemented" in message
        assert "Doorman lease server" in message
        # Known now: the next wait raises before waiting at all.
        with pytest.raises(tollgate.LeaseError, match="Unimplemented"):
            resource.wait()
        assert "Unimplemented" in resource.last_error
        assert client.last_error == resource.last_error
        limiter = client.rate_limiter("pace", 10)
        with pytest.raises(tollgate.LeaseError, match="Unimplemented"):
            limiter.wait(timeout=PATIENCE)


def test_updates_raise_the_same_error(quota):
    async def follow(resource):
        async for _ in resource.updates():
            pass

    with tollgate.LeaseClient([quota.address]) as client:
        resource = client.resource("api", 10)
        with pytest.raises(tollgate.LeaseError, match="Unimplemented"):
            asyncio.run(asyncio.wait_for(follow(resource), PATIENCE))


def test_a_dead_server_times_out_to_none_and_last_error_says_why(dead_address):
    with tollgate.LeaseClient([dead_address], rpc_timeout=0.5) as client:
        resource = client.resource("api", 10, expiry="pessimistic")
        deadline = time.monotonic() + PATIENCE
        while resource.last_error is None:
            assert time.monotonic() < deadline, "no refresh failed"
            # Retried, not fatal: the wait ends at its timeout.
            assert resource.wait(timeout=0.1) is None
        assert resource.last_error.startswith(f"{dead_address}: Unavailable")
        assert client.last_error == resource.last_error
        limiter = client.rate_limiter("pace", 10, expiry="pessimistic")
        with pytest.raises(TimeoutError) as raised:
            limiter.acquire_timeout(0.1)
        assert f"the last refresh failed: {dead_address}: Unavailable" in str(raised.value)


def test_last_error_is_none_once_a_server_answers(doorman):
    with tollgate.LeaseClient([doorman.address]) as client:
        resource = client.resource("api", 10)
        wait_for_source(resource, "lease")
        assert resource.last_error is None and client.last_error is None


def test_one_server_of_another_kind_among_good_ones_is_a_detour(quota, doorman):
    # The client moves on to the next server after the refusal: only when
    # every server refuses so does a wait give up.
    with tollgate.LeaseClient([quota.address, doorman.address], rpc_timeout=PATIENCE) as client:
        resource = client.resource("api", 10)
        assert wait_for_source(resource, "lease").capacity == 10
        assert resource.last_error is None
