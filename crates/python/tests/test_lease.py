"""LeaseClient against a real `tollgate serve`: leases, release, updates,
a dead server, a server that stops mid-lease, and the leased limiter."""

import asyncio
import time

import pytest

import tollgate
from conftest import DOORMAN_CONFIG, PATIENCE, Server


def wait_for_source(resource, source: str):
    """Waits (a hang guard, not a speed claim) until the state has `source`."""
    deadline = time.monotonic() + PATIENCE
    state = resource.current()
    while state.source != source:
        assert time.monotonic() < deadline, f"no {source!r} state: {state}"
        state = resource.wait(timeout=1.0) or resource.current()
    return state


def test_a_resource_is_granted_its_wants_and_released(doorman):
    with tollgate.LeaseClient([doorman.address]) as client:
        assert client.id
        first = client.resource("api", 100, priority=1)
        assert first.id == "api"
        state = wait_for_source(first, "lease")
        assert first.capacity == 100 == state.capacity == state.lease_capacity
        assert state.expiry > time.time() - 1
        assert state.refresh_interval == 1.0
        assert state.safe_capacity == 7
        assert state.refreshes >= 1
        first.release()
        with pytest.raises(tollgate.LeaseError, match="released"):
            first.set_wants(5)
        first.release()  # twice: nothing

    # Released, not left to expire: a new client is granted everything at
    # once (the old lease would hold all 100 for up to 2 s).
    with tollgate.LeaseClient([doorman.address]) as client:
        second = client.resource("api", 100)
        assert wait_for_source(second, "lease").capacity == 100


def test_close_and_with_release_what_is_held(doorman):
    client = tollgate.LeaseClient([doorman.address])
    with client.resource("ctx", 100) as held:
        wait_for_source(held, "lease")
    with pytest.raises(tollgate.LeaseError):
        held.set_wants(1)
    kept = client.resource("kept", 100)
    wait_for_source(kept, "lease")
    client.close()
    with pytest.raises(tollgate.LeaseError, match="released"):
        kept.set_wants(1)
    with pytest.raises(tollgate.LeaseError, match="closed"):
        client.resource("late", 1)
    client.close()  # twice: nothing
    with tollgate.LeaseClient([doorman.address]) as other:
        assert wait_for_source(other.resource("kept", 100), "lease").capacity == 100


LONG_LEASES = DOORMAN_CONFIG.replace("lease_length: 2", "lease_length: 600")


def test_a_resource_dropped_in_python_is_released(tmp_path):
    import gc

    # Leases of 10 minutes: only a release frees the capacity in time.
    server = Server("serve", LONG_LEASES, tmp_path)
    try:
        with tollgate.LeaseClient([server.address]) as client:
            dropped = client.resource("dropped", 100)
            assert wait_for_source(dropped, "lease").capacity == 100
            del dropped
            gc.collect()
            with tollgate.LeaseClient([server.address]) as other:
                again = other.resource("dropped", 100)
                deadline = time.monotonic() + PATIENCE
                while again.capacity != 100:
                    assert time.monotonic() < deadline, again.current()
                    again.wait(timeout=1.0)
    finally:
        server.stop()


def test_updates_is_an_async_iterator_that_ends_on_release(doorman):
    async def main():
        with tollgate.LeaseClient([doorman.address]) as client:
            resource = client.resource("stream", 30)
            seen = []

            async def follow():
                async for state in resource.updates():
                    seen.append(state)
                    if state.source == "lease" and len(seen) == 1 or state.refreshes == 2:
                        resource.release()

            await asyncio.wait_for(follow(), PATIENCE)
            assert seen[0].source in ("pending", "lease")
            assert any(s.source == "lease" and s.capacity == 30 for s in seen)

    asyncio.run(main())


@pytest.mark.parametrize("expiry, capacity", [("optimistic", 30), ("pessimistic", 0), ("safe", 0)])
def test_a_dead_server_leaves_the_expiry_mode_in_force(dead_address, expiry, capacity):
    client = tollgate.LeaseClient([dead_address], rpc_timeout=0.5)
    resource = client.resource("api", 30, expiry=expiry)
    assert resource.capacity == capacity
    assert resource.current().source == "pending"
    # Nothing to wait for: no answer comes.
    assert resource.wait(timeout=0.3) is None
    with pytest.raises(tollgate.LeaseError) as raised:
        resource.release()
    # The Rust cause comes along.
    assert "release not acknowledged" in str(raised.value)
    client.close()


def test_a_server_that_stops_mid_lease_gives_way_to_the_expiry_mode_at_expiry(doorman):
    client = tollgate.LeaseClient([doorman.address], rpc_timeout=0.5)
    modes = {"optimistic": 20, "pessimistic": 0, "safe": 7}  # safe_capacity is 7
    resources = {m: client.resource(f"r-{m}", 20, expiry=m) for m in modes}
    leases = {m: wait_for_source(r, "lease") for m, r in resources.items()}
    assert all(s.capacity == 20 for s in leases.values())
    doorman.kill()
    for mode, resource in resources.items():
        expired = wait_for_source(resource, "expired")
        # Not before the lease's expiry (whatever the last refresh was).
        assert time.time() >= resource.current().expiry
        assert expired.capacity == modes[mode]
        assert resource.capacity == modes[mode]
        assert expired.lease_capacity == 20
    client.close()


def test_argument_errors_are_value_errors(doorman):
    with pytest.raises(ValueError, match="no server"):
        tollgate.LeaseClient([])
    with pytest.raises(ValueError, match="invalid server address"):
        tollgate.LeaseClient(["not an address"])
    with pytest.raises(FileNotFoundError, match="nowhere.pem"):
        tollgate.LeaseClient([doorman.address], tls=tollgate.Tls("/nowhere.pem"))
    with pytest.raises(ValueError, match="go together"):
        tollgate.Tls("ca.pem", cert="c.pem")
    with tollgate.LeaseClient([doorman.address]) as client:
        with pytest.raises(ValueError, match="unknown expiry mode"):
            client.resource("x", 1, expiry="hopeful")
        with pytest.raises(ValueError, match="wants"):
            client.resource("x", -1)
        held = client.resource("dup", 1)
        with pytest.raises(ValueError, match="already holds"):
            client.resource("dup", 1)
        held.release()


def test_a_leased_rate_limiter_runs_at_its_lease(doorman):
    async def pace(limiter):
        return await asyncio.gather(*(limiter.acquire_async() for _ in range(20)))

    with tollgate.LeaseClient([doorman.address]) as client:
        with client.rate_limiter("pace", 50) as limiter:
            assert wait_for_source(limiter, "lease").capacity == 50
            assert limiter.capacity == 50
            assert all(limiter.acquire() >= 0 for _ in range(20))
            assert all(x >= 0 for x in asyncio.run(pace(limiter)))
            assert limiter.acquire_timeout(PATIENCE) >= 0
            assert limiter.stats().admitted >= 41
        with pytest.raises(tollgate.LeaseError):
            limiter.acquire()


def test_a_leased_rate_limiter_without_capacity_refuses(dead_address):
    with tollgate.LeaseClient([dead_address], rpc_timeout=0.5) as client:
        limiter = client.rate_limiter("none", 50, expiry="pessimistic")
        assert limiter.capacity == 0
        assert not limiter.try_acquire()
        with pytest.raises(TimeoutError):
            limiter.acquire_timeout(0.1)
        optimistic = client.rate_limiter("hopeful", 1000, expiry="optimistic")
        assert optimistic.capacity == 1000
        assert optimistic.acquire() >= 0
