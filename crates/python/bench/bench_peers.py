"""tollgate's Python limiter beside the Python rate limiters people use.

Each contender runs in its own process (so CPU time is its own) and paces
the same job: `--rate` ops/s from `--threads` Python threads (asyncio
contenders: `--tasks` tasks), `--duration` seconds after a warm-up. It
prints the achieved rate and the process's CPU time per admitted op, then
tollgate's try_acquire calls per second from one thread, then the CPU a
process holding `--leases` leases from a real `tollgate serve` spends
keeping them fresh.

    python3 -m venv /tmp/bench && . /tmp/bench/bin/activate
    pip install maturin limits pyrate-limiter aiolimiter token-bucket
    maturin build --release -m crates/python/Cargo.toml -o /tmp/wheels
    pip install /tmp/wheels/tollgate-*.whl
    cargo build --release -p tollgate-cli
    python crates/python/bench/bench_peers.py

tollgate runs three times: with the default fill interval (CPython's
switch interval, 5 ms), with `fill_interval=0.001`, and with
`fill_interval=0.0005` (the Rust limiter's default), which wakes the
waiting threads ten times as often as 5 ms (each for a tenth of the ops)
and lets ops start in bursts of up to 0.5 ms. The fill interval is the
burst granularity: compare it with a peer's bucket or window of the same
length (`tollgate-1ms` with `token-bucket`, `tollgate` with
`token-bucket-5ms`), as the last lines print.
The last row is the loop alone, calling a builtin instead of a limiter,
unpaced: the Python overhead every row pays per op.

Peers, each in its cheapest in-memory form, blocking the way its docs
suggest: `limits` (fixed window of one second, sleeping until the window
resets), `pyrate-limiter` (`Limiter(Rate(rate, Duration.SECOND))`,
blocking try_acquire), `token-bucket` (capacity of 1 ms of ops, sleeping
0.5 ms when empty; `token-bucket-5ms`: 5 ms of ops, sleeping 2.5 ms),
`aiolimiter` (`AsyncLimiter(rate, 1.0)`). (With a 1 ms window,
pyrate-limiter reached 2K ops/s and aiolimiter 79K at the same CPU per
op; limits counts whole seconds.)
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


# ----- one contender, in a child process ------------------------------------


def measure(counts, warmup, duration, stop):
    """Counts ops and CPU time over `duration` seconds after `warmup`."""
    time.sleep(warmup)
    ops0, cpu0, t0 = sum(counts), time.process_time(), time.perf_counter()
    time.sleep(duration)
    ops1, cpu1, t1 = sum(counts), time.process_time(), time.perf_counter()
    stop()
    ops, seconds, cpu = ops1 - ops0, t1 - t0, cpu1 - cpu0
    return {"ops": ops, "seconds": seconds, "rate": ops / seconds, "cpu_s": cpu,
            "cpu_ns_per_op": cpu / ops * 1e9 if ops else None}


# tollgate's rows: the fill interval each passes (None: the default, 5 ms).
TOLLGATE_INTERVALS = {"tollgate": None, "tollgate-1ms": 0.001, "tollgate-0.5ms": 0.0005}
# token-bucket's rows: the bucket's length in milliseconds of ops.
TOKEN_BUCKET_MS = {"token-bucket": 1, "token-bucket-5ms": 5}
# Equal burst granularity: tollgate's fill interval beside token-bucket's
# bucket of the same length.
SAME_GRANULARITY = (("1 ms", "tollgate-1ms", "token-bucket"), ("5 ms", "tollgate", "token-bucket-5ms"))


def thread_op(name, rate):
    """A blocking "one op" callable for each thread, sharing one limiter."""
    if name in TOLLGATE_INTERVALS:
        import tollgate

        # The default fill interval (CPython's switch interval, 5 ms), 1 ms
        # and 0.5 ms: more wake-ups, ops starting in shorter bursts.
        interval = TOLLGATE_INTERVALS[name]
        limiter = tollgate.RateLimiter(str(rate), fill_interval=interval)
        return lambda: limiter.acquire
    if name == "harness":
        # No limiter and no pacing: what the loop itself costs per op.
        return lambda: int
    if name == "limits":
        from limits import RateLimitItemPerSecond, storage, strategies

        limiter = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
        item = RateLimitItemPerSecond(rate, 1)

        def op():
            while not limiter.hit(item, "bench"):
                reset = limiter.get_window_stats(item, "bench").reset_time
                time.sleep(max(0.0, reset - time.time()))

        return lambda: op
    if name == "pyrate-limiter":
        from pyrate_limiter import Duration, Limiter, Rate

        limiter = Limiter(Rate(rate, Duration.SECOND))
        return lambda: (lambda: limiter.try_acquire("bench"))
    if name in TOKEN_BUCKET_MS:
        import token_bucket

        # A bucket of `ms` of ops; an empty one is tried again after half
        # of that.
        ms = TOKEN_BUCKET_MS[name]
        limiter = token_bucket.Limiter(rate, max(1, rate * ms // 1000), token_bucket.MemoryStorage())

        def op():
            while not limiter.consume(b"bench"):
                time.sleep(ms / 2000)

        return lambda: op
    raise SystemExit(f"unknown contender {name}")


def run_threads(name, rate, threads, warmup, duration):
    make = thread_op(name, rate)
    counts = [0] * threads
    running = [True]

    def work(i):
        op = make()
        while running[0]:
            op()
            counts[i] += 1

    pool = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    result = measure(counts, warmup, duration, lambda: running.__setitem__(0, False))
    for t in pool:
        t.join(5)
    return result


def run_tasks(name, rate, tasks, warmup, duration):
    async def main():
        if name == "aiolimiter":
            from aiolimiter import AsyncLimiter

            limiter = AsyncLimiter(rate, 1.0)
            acquire = limiter.acquire
        elif name == "tollgate-async":
            import tollgate

            limiter = tollgate.RateLimiter(str(rate))
            acquire = limiter.acquire_async
        else:
            raise SystemExit(f"unknown contender {name}")
        counts = [0]
        running = [True]

        async def work():
            while running[0]:
                await acquire()
                counts[0] += 1

        workers = [asyncio.create_task(work()) for _ in range(tasks)]
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            None, measure, counts, warmup, duration, lambda: running.__setitem__(0, False)
        )
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return result

    return asyncio.run(main())


def run_try_acquire(calls):
    import tollgate

    out = {}
    for label, spec in (("admitting", "1e12"), ("refusing", "0.001,1.0")):
        limiter = tollgate.RateLimiter(spec)
        try_acquire = limiter.try_acquire
        while label == "refusing" and try_acquire():
            pass
        t0 = time.perf_counter()
        for _ in range(calls):
            try_acquire()
        out[label] = calls / (time.perf_counter() - t0)
    return out


def run_leases(address, leases, seconds):
    import tollgate

    client = tollgate.LeaseClient([address])
    resources = [client.resource(f"bench-{i}", 1.0) for i in range(leases)]
    deadline = time.monotonic() + 120
    while any(r.current().source != "lease" for r in resources):
        if time.monotonic() > deadline:
            raise SystemExit("leases not granted within 120 s")
        time.sleep(0.2)
    refreshes0 = sum(r.current().refreshes for r in resources)
    cpu0, t0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    refreshes = sum(r.current().refreshes for r in resources) - refreshes0
    held = sum(r.current().source == "lease" for r in resources)
    client.close()
    return {"leases": leases, "held": held, "seconds": wall, "cpu_s": cpu,
            "core_percent": cpu / wall * 100, "lease_refreshes": refreshes}


# ----- the parent: runs each contender and prints the table -----------------


def child(args, *extra):
    out = subprocess.run(
        [sys.executable, __file__, *extra, "--rate", str(args.rate), "--threads", str(args.threads),
         "--tasks", str(args.tasks), "--duration", str(args.duration), "--warmup", str(args.warmup)],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tollgate_binary(args):
    if args.tollgate_bin:
        return args.tollgate_bin
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "tollgate"
        if path.exists():
            return str(path)
    raise SystemExit("no tollgate binary: cargo build --release -p tollgate-cli, or --tollgate-bin")


def lease_run(args, refresh):
    port = free_port()
    config = (
        "resources:\n"
        '  - identifier_glob: "*"\n'
        "    capacity: 1000000\n"
        f"    algorithm: {{kind: FAIR_SHARE, lease_length: 60, refresh_interval: {refresh},"
        " learning_mode_duration: 0}\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config)
    server = subprocess.Popen(
        [tollgate_binary(args), "serve", "--config", f.name, "--host", "127.0.0.1",
         "--port", str(port), "--debug-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return child(args, "--child-leases", f"127.0.0.1:{port}", "--leases", str(args.leases),
                     "--lease-seconds", str(args.lease_seconds))
    finally:
        server.terminate()
        server.wait(30)
        os.unlink(f.name)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--calls", type=int, default=5_000_000)
    p.add_argument("--leases", type=int, default=1000)
    p.add_argument("--lease-seconds", type=float, default=30.0)
    p.add_argument("--refresh", type=int, nargs="*", default=[15, 1],
                   help="the lease server's refresh intervals to measure, seconds")
    p.add_argument("--tollgate-bin")
    p.add_argument("--only", nargs="*", help="contenders to run (default: all), and try_acquire, leases")
    p.add_argument("--child")
    p.add_argument("--child-try", action="store_true")
    p.add_argument("--child-leases")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = p.parse_args()

    if args.child:
        if args.child in ("aiolimiter", "tollgate-async"):
            r = run_tasks(args.child, args.rate, args.tasks, args.warmup, args.duration)
        else:
            r = run_threads(args.child, args.rate, args.threads, args.warmup, args.duration)
        print(json.dumps(r))
        return
    if args.child_try:
        print(json.dumps(run_try_acquire(args.calls)))
        return
    if args.child_leases:
        print(json.dumps(run_leases(args.child_leases, args.leases, args.lease_seconds)))
        return

    report = {"rate": args.rate, "threads": args.threads, "tasks": args.tasks,
              "duration": args.duration, "pace": {}, "python": sys.version.split()[0]}
    contenders = args.only or ["tollgate", "tollgate-1ms", "tollgate-0.5ms", "limits", "pyrate-limiter",
                               "token-bucket", "token-bucket-5ms", "aiolimiter", "tollgate-async",
                               "harness"]
    print(f"pacing {args.rate:,} ops/s for {args.duration:g} s after {args.warmup:g} s of warm-up "
          f"({args.threads} threads; asyncio: {args.tasks} tasks), Python {report['python']}")
    print(f"{'contender':<28} {'achieved ops/s':>15} {'x target':>9} {'CPU ns/op':>10}")
    for name in contenders:
        r = child(args, "--child", name)
        report["pace"][name] = r
        how = f"{args.tasks} tasks" if name in ("aiolimiter", "tollgate-async") else f"{args.threads} threads"
        label = f"{name} ({how})" if name != "harness" else "the loop alone, unpaced"
        if "error" in r:
            print(f"{label:<28} error: {r['error']}")
            continue
        ns = f"{r['cpu_ns_per_op']:.0f}" if r["cpu_ns_per_op"] else "-"
        print(f"{label:<28} {r['rate']:>15,.0f} {r['rate'] / args.rate:>9.4f} {ns:>10}")
    cpu = {n: r.get("cpu_ns_per_op") for n, r in report["pace"].items() if r.get("cpu_ns_per_op")}
    # The best peer at its usual setting (token-bucket's 1 ms bucket), whatever tollgate's interval.
    peers = [cpu[n] for n in ("limits", "pyrate-limiter", "token-bucket", "aiolimiter") if n in cpu]
    for name in TOLLGATE_INTERVALS:
        if name in cpu and peers:
            report[f"best_peer_over_{name}"] = min(peers) / cpu[name]
            print(f"the best peer's CPU per op / {name}'s: {min(peers) / cpu[name]:.1f}x")
    for span, ours, theirs in SAME_GRANULARITY:
        if ours in cpu and theirs in cpu:
            report[f"{theirs}_over_{ours}"] = cpu[theirs] / cpu[ours]
            print(f"at {span} granularity, {theirs}'s CPU per op / {ours}'s: {cpu[theirs] / cpu[ours]:.1f}x")

    if not args.only or "try_acquire" in args.only:
        r = child(args, "--child-try", "--calls", str(args.calls))
        report["try_acquire"] = r
        if "error" in r:
            print(f"try_acquire: error: {r['error']}")
        else:
            print(f"try_acquire from one thread: {r['admitting'] / 1e6:.2f}M calls/s admitting, "
                  f"{r['refusing'] / 1e6:.2f}M calls/s refusing")

    if not args.only or "leases" in args.only:
        report["leases"] = {}
        for refresh in args.refresh:
            r = lease_run(args, refresh)
            report["leases"][str(refresh)] = r
            if "error" in r:
                print(f"leases (refresh {refresh} s): error: {r['error']}")
                continue
            print(f"{r['leases']} leases, refresh every {refresh} s: {r['core_percent']:.3f}% of a core over "
                  f"{r['seconds']:.0f} s ({r['cpu_s'] * 1e3:.1f} ms CPU, {r['lease_refreshes']} lease refreshes, "
                  f"{r['held']} held at the end)")
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
