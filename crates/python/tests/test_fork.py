"""A forked child cannot use what its parent made (the background work
stayed in the parent): every use raises RuntimeError at once, rather than
a wait that never ends; what the child makes itself works."""

import subprocess

from conftest import PATIENCE, run_python

FORKED = r"""
import asyncio, os, socket, tollgate
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    dead = "127.0.0.1:%d" % s.getsockname()[1]
client = tollgate.LeaseClient([dead], rpc_timeout=0.5)
resource = client.resource("api", 10)
limiter = client.rate_limiter("pace", 10, expiry="optimistic")
quota = tollgate.QuotaClient(dead, "svc", "b", fallback_rate=100, deadline=0.5)
assert resource.wait(timeout=0.05) is None   # the runtime runs, in the parent
pid = os.fork()
if pid == 0:
    failures = []
    uses = {
        "wait": lambda: resource.wait(timeout=2.0),
        "capacity": lambda: resource.capacity,
        "updates": resource.updates,
        "release": resource.release,
        "new resource": lambda: client.resource("other", 1),
        "close": client.close,
        "acquire": limiter.acquire,
        "acquire_async": limiter.acquire_async,
        "allow": quota.allow,
        "allow_async": quota.allow_async,
    }
    for name, use in uses.items():
        try:
            use()
            failures.append(name + ": no error")
        except RuntimeError as e:
            if "forked child" not in str(e) or "create a new" not in str(e):
                failures.append(name + ": " + str(e))
    # What the child makes works: its runtime is its own.
    fresh = tollgate.LeaseClient([dead], rpc_timeout=0.5)
    if fresh.resource("api", 10).wait(timeout=0.2) is not None:
        failures.append("a new client's wait")
    slow = tollgate.RateLimiter("1K,1.0")
    while slow.try_acquire():
        pass
    if not asyncio.run(slow.acquire_async()) >= 0:
        failures.append("a new limiter's acquire_async")
    print("child:", failures, flush=True)
    os._exit(1 if failures else 0)
_, status = os.waitpid(pid, 0)
print("exit:", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_child_raises_at_once_and_makes_its_own():
    process = run_python(FORKED, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A hang guard only: the child's wait on its parent's resource
        # used to outlive its 2 s timeout for good.
        out, err = process.communicate(timeout=PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.splitlines() == ["child: []", "exit: 0"], (out, err)
