"""RateLimiter and TokenBucket: specs, acquires, async, Ctrl-C."""

import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest

import tollgate
from conftest import PATIENCE, run_python


@pytest.mark.parametrize(
    "spec, word",
    [
        ("abc", "not a number"),
        ("0", "out of range"),
        ("10K,0.5", "burst"),
        ("10K,1.1,sideways", "sideways"),
        ("", ""),
    ],
)
def test_a_bad_spec_is_a_value_error_that_names_it(spec, word):
    with pytest.raises(ValueError) as raised:
        tollgate.RateLimiter(spec)
    message = str(raised.value)
    assert repr(spec).strip("'") in message or spec == ""
    assert word in message


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError):
        tollgate.RateLimiter([1, 2])
    with pytest.raises(ValueError):
        tollgate.RateLimiter(-5.0)
    limiter = tollgate.RateLimiter("1K")
    with pytest.raises(ValueError):
        limiter.apply("fast")
    with pytest.raises(ValueError):
        limiter.acquire_timeout(float("nan"))
    with pytest.raises(ValueError):
        limiter.acquire(2**62)
    with pytest.raises(ValueError):
        tollgate.TokenBucket("10", max_wait=-1)
    with pytest.raises(ValueError, match="fill_interval"):
        tollgate.RateLimiter("1K", fill_interval=-0.001)
    with pytest.raises(ValueError, match="max_backlog"):
        tollgate.RateLimiter("1K", max_backlog=float("inf"))


def test_the_fill_interval_defaults_to_the_switch_interval_at_most_5_ms():
    before = sys.getswitchinterval()
    try:
        assert tollgate.RateLimiter("1K").fill_interval == pytest.approx(before)
        sys.setswitchinterval(0.002)
        assert tollgate.RateLimiter("1K").fill_interval == pytest.approx(0.002)
        sys.setswitchinterval(0.05)
        assert tollgate.RateLimiter("1K").fill_interval == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(before)
    assert tollgate.RateLimiter("1K", fill_interval=0.0005).fill_interval == pytest.approx(0.0005)


def test_options_are_applied():
    limiter = tollgate.RateLimiter("1K", max_backlog=0.25, fill_interval=0.005)
    assert limiter.fill_interval == pytest.approx(0.005)
    assert limiter.max_backlog == 0.25
    limiter.max_backlog = None
    assert limiter.max_backlog is None
    assert all(limiter.acquire() >= 0 for _ in range(50))


def test_spec_forms_and_apply():
    limiter = tollgate.RateLimiter("10K,1.5")
    assert limiter.rate == 10_000
    assert limiter.burst_ratio == 1.5
    assert limiter.spec == "10K,1.5"
    limiter.apply("2.5K;1.2;configure")
    assert limiter.rate == 2_500
    assert limiter.burst_ratio == 1.2
    assert tollgate.RateLimiter(250).rate == 250
    assert repr(tollgate.RateLimiter("1M")).startswith("RateLimiter('1M,1.1', ")


def test_acquire_counts_and_reports_lateness():
    limiter = tollgate.RateLimiter("5K")
    lateness = [limiter.acquire() for _ in range(500)]
    assert all(isinstance(x, float) and x >= 0 for x in lateness)
    assert limiter.acquire(0) >= 0
    assert limiter.acquire(10) >= 0
    stats = limiter.stats()
    assert stats.admitted >= 510
    assert stats.total_wait >= 0 and stats.backlog >= 0
    assert limiter.backlog >= 0


def test_try_acquire_takes_what_is_there_and_no_more():
    # One op in 1,000 s: the start allowance, then nothing.
    limiter = tollgate.RateLimiter("0.001,1.0")
    taken = 0
    while limiter.try_acquire():
        taken += 1
        assert taken < 10
    assert not limiter.try_acquire()
    assert not limiter.try_acquire(5)
    assert limiter.try_acquire(0)


def test_acquire_timeout_raises_timeout_error_and_takes_nothing():
    limiter = tollgate.RateLimiter("0.001,1.0")
    while limiter.try_acquire():
        pass
    before = limiter.stats().admitted
    with pytest.raises(TimeoutError) as raised:
        limiter.acquire_timeout(0.05)
    assert "no capacity within" in str(raised.value)
    assert limiter.stats().admitted == before
    fast = tollgate.RateLimiter("1M")
    assert fast.acquire_timeout(1.0) >= 0


def test_threads_share_one_limiter():
    limiter = tollgate.RateLimiter("20K")
    done = []

    def work():
        for _ in range(1000):
            limiter.acquire()
        done.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE)
    assert len(done) == 4
    assert limiter.stats().admitted >= 4000


def test_acquire_async_wakes_every_task():
    async def main():
        limiter = tollgate.RateLimiter("2K")
        lateness = await asyncio.wait_for(
            asyncio.gather(*(limiter.acquire_async() for _ in range(1000))), PATIENCE
        )
        assert len(lateness) == 1000 and all(x >= 0 for x in lateness)
        assert limiter.stats().admitted >= 1000
        assert await limiter.acquire_async(0) >= 0

    asyncio.run(main())


def test_a_cancelled_async_acquire_takes_nothing():
    async def main():
        limiter = tollgate.RateLimiter("0.001,1.0")
        while limiter.try_acquire():
            pass
        before = limiter.stats().admitted
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(limiter.acquire_async(), 0.05)
        # The waiter left the queue: another caller gets nothing either,
        # and the count is unchanged.
        assert not limiter.try_acquire()
        assert limiter.stats().admitted == before

    asyncio.run(main())


def test_acquire_async_awaited_outside_a_loop_is_an_error():
    limiter = tollgate.RateLimiter("0.001,1.0")
    while limiter.try_acquire():
        pass
    coroutine = limiter.acquire_async()
    with pytest.raises(RuntimeError, match="no running event loop"):
        coroutine.send(None)


# A child started where SIGINT is ignored (a background job of a shell
# without job control, as CI runners may start the suite) inherits that,
# and Python then installs no KeyboardInterrupt handler: put back the one a
# terminal's Ctrl-C meets.
BLOCKED = """
import signal, sys, tollgate
signal.signal(signal.SIGINT, signal.default_int_handler)
limiter = tollgate.RateLimiter("0.001,1.0")   # one op in 1,000 s
while limiter.try_acquire():
    pass
print("blocking", flush=True)
try:
    limiter.acquire()
except KeyboardInterrupt:
    print("interrupted", limiter.stats().admitted, flush=True)
    sys.exit(3)
print("acquired", flush=True)
"""


LEASED = """
import signal, socket, sys, tollgate
signal.signal(signal.SIGINT, signal.default_int_handler)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    dead = "127.0.0.1:%d" % s.getsockname()[1]
client = tollgate.LeaseClient([dead], rpc_timeout=0.5)
limiter = client.rate_limiter("none", 10, expiry="pessimistic")   # capacity 0: waits for a lease
print("blocking", flush=True)
try:
    limiter.acquire()
except KeyboardInterrupt:
    print("interrupted", limiter.stats().admitted, flush=True)
    sys.exit(3)
print("acquired", flush=True)
"""


def main_thread_state(pid: int) -> str:
    """The scheduler state of a process's main thread ("R", "S", ...)."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize(
    "code, admitted",
    # The start allowance, and nothing more; a leased limiter without a
    # lease admits nothing.
    [(BLOCKED, "1"), (BLOCKED.replace("limiter.acquire()", "limiter.acquire(5)"), "1"), (LEASED, "0")],
    ids=["acquire", "acquire-5", "leased-acquire"],
)
def test_ctrl_c_in_a_blocked_acquire_raises_keyboard_interrupt(code, admitted):
    process = run_python(code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "blocking"
        # Past its print, the child's only sleep is the acquire's park.
        deadline = time.monotonic() + PATIENCE
        while main_thread_state(process.pid) != "S":
            assert time.monotonic() < deadline, "the child never blocked"
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        # A hang guard only: a blocked acquire that ignored SIGINT would
        # wait 1,000 s.
        out, err = process.communicate(timeout=PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 3, err
    assert out.split() == ["interrupted", admitted]


def test_token_bucket_borrows_then_refuses():
    # 1 token/s, size 2, at most 1.5 s of wait: 0, 0 and 0 (borrowed), then
    # 1 s for the borrowed token, then 2 s is over the limit.
    bucket = tollgate.TokenBucket("1", size=2, max_wait=1.5, max_debt=10)
    assert bucket.size == 2 and bucket.rate == 1
    waits = [bucket.reserve() for _ in range(4)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert 0.9 < waits[3] <= 1.0
    with pytest.raises(tollgate.BucketRefused) as raised:
        bucket.reserve()
    e = raised.value
    assert isinstance(e, tollgate.TollgateError)
    assert e.refusal == "max_wait" and e.limit == 1.5 and e.wait > 1.5
    assert bucket.available < 0
    with pytest.raises(tollgate.BucketRefused) as raised:
        bucket.reserve(1, max_wait=0.0)
    assert raised.value.refusal == "max_wait"
    with pytest.raises(tollgate.BucketRefused) as raised:
        bucket.reserve(2**62)
    assert raised.value.refusal == "too_large"


class LoopWithoutAttributes(asyncio.SelectorEventLoop):
    """An event loop that takes no new attributes, as uvloop's does not."""

    def __setattr__(self, name, value):
        if name.startswith("_tollgate"):
            raise AttributeError(name)
        super().__setattr__(name, value)


def test_acquire_async_on_a_loop_that_takes_no_attributes():
    async def main():
        limiter = tollgate.RateLimiter("2K")
        lateness = await asyncio.wait_for(
            asyncio.gather(*(limiter.acquire_async() for _ in range(300))), PATIENCE
        )
        assert len(lateness) == 300 and all(x >= 0 for x in lateness)

    loop = LoopWithoutAttributes()
    try:
        loop.run_until_complete(main())
        assert not hasattr(loop, "_tollgate_inbox")
    finally:
        loop.close()
