"""Pace work at an exact rate from threads and from asyncio tasks.

    python crates/python/examples/rate_limiter.py

Each op's lateness is how long after its place in the schedule it started:
add it to the op's own time to report response times free of coordinated
omission.
"""

import asyncio
import threading
import time

import tollgate


def threads(limiter: tollgate.RateLimiter, seconds: float) -> None:
    stop = time.monotonic() + seconds
    worst = []

    def work() -> None:
        late = 0.0
        while time.monotonic() < stop:
            late = max(late, limiter.acquire())  # blocks, GIL released
        worst.append(late)

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    stats = limiter.stats()
    print(f"threads: {stats.admitted} ops admitted, worst lateness {max(worst) * 1e3:.3f} ms")


async def tasks(limiter: tollgate.RateLimiter, count: int) -> None:
    start = time.monotonic()
    lateness = await asyncio.gather(*(limiter.acquire_async() for _ in range(count)))
    elapsed = time.monotonic() - start
    print(f"asyncio: {count} tasks in {elapsed:.2f} s, worst lateness {max(lateness) * 1e3:.3f} ms")


def main() -> None:
    limiter = tollgate.RateLimiter("20K,1.1")  # 20,000 ops/s, catch up at 1.1x
    threads(limiter, 1.0)
    limiter.apply("5K")  # live: a new rate, keeping the backlog as time
    asyncio.run(tasks(limiter, 5_000))
    # Never wait: take an op only if it is there now.
    print("try_acquire:", limiter.try_acquire(), "backlog", limiter.backlog)
    try:
        tollgate.RateLimiter("10 per second")
    except ValueError as e:
        print("bad spec:", e)


if __name__ == "__main__":
    main()
