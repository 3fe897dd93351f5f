"""Capacity leases from a Doorman server, and a limiter fed by one.

    cargo build --release && target/release/tollgate serve \
        --config crates/doorman/examples/doorman-fair.yaml &
    python crates/python/examples/lease_client.py 127.0.0.1:15000
"""

import asyncio
import sys

import tollgate


async def follow(resource: tollgate.Resource, count: int) -> None:
    async for state in resource.updates():
        print(f"  {resource.id}: {state.capacity:g} ({state.source}), refreshes {state.refreshes}")
        count -= 1
        if count == 0:
            break


def main() -> None:
    server = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15000"
    # Releases everything it holds when the block ends.
    with tollgate.LeaseClient([server], rpc_timeout=2.0) as client:
        # 200 units of `api` at priority 1; if the servers go away and the
        # lease expires, fall back to the server's safe capacity.
        api = client.resource("api", 200, priority=1, expiry="safe")
        asyncio.run(follow(api, 2))
        print("api capacity now:", api.capacity)

        # A limiter whose rate is what the server grants for `pace`.
        with client.rate_limiter("pace", 500, expiry="pessimistic") as limiter:
            while limiter.current().source == "pending":
                limiter.wait(timeout=5.0)
            for _ in range(1000):
                limiter.acquire()
            print(f"pace: 1000 ops at {limiter.capacity:g}/s, {limiter.stats()}")
        try:
            api.release()
        except tollgate.LeaseError as e:
            print("release not acknowledged:", e)


if __name__ == "__main__":
    main()
