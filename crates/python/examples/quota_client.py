"""Ask a quota service for tokens, and honour the wait it imposes.

    cargo build --release && target/release/tollgate quota \
        --config crates/quota/examples/quota-load.yaml &
    python crates/python/examples/quota_client.py 127.0.0.1:15100
"""

import asyncio
import sys
import time

import tollgate


def main() -> None:
    server = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15100"
    # Namespace `one`, bucket `b`; 100/s from a local bucket whenever the
    # service is slow (over 50 ms), down, or has no such bucket.
    client = tollgate.QuotaClient(server, "one", "b", fallback_rate="100", deadline=0.05)
    granted = client.allow(5)  # the tokens, and the wait to honour
    print(f"allow: from the {granted.source}, wait {granted.wait:.3f} s")
    time.sleep(granted.wait)
    print("admit (waits for you):", client.admit())

    async def many() -> None:
        answers = await asyncio.gather(*(client.admit_async() for _ in range(100)))
        print(f"asyncio: {len(answers)} admitted, {client.fallbacks} by the fallback")

    asyncio.run(many())
    try:
        for _ in range(3):
            client.admit(10**9)
    except tollgate.QuotaDenied as denied:
        print("denied:", denied.status, denied)


if __name__ == "__main__":
    main()
