"""Fixtures: the `tollgate` binary, free ports, and real servers
(`tollgate serve`, `tollgate quota`) started for a test and stopped after."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# A hang guard for waits that must end: never a claim about speed.
PATIENCE = 60.0


def tollgate_binary() -> str:
    """$TOLLGATE_BIN, else the workspace's release build, else its debug build."""
    if os.environ.get("TOLLGATE_BIN"):
        return os.environ["TOLLGATE_BIN"]
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "tollgate"
        if path.exists():
            return str(path)
    pytest.fail("no tollgate binary: run `cargo build -p tollgate-cli` or set TOLLGATE_BIN")


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {process.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server not listening on {port}")


class Server:
    """A `tollgate` server subprocess on a free port."""

    def __init__(self, command: str, config: str, tmp_path: Path, extra=()):
        self.port = free_port()
        path = tmp_path / f"{command}-{self.port}.yaml"
        path.write_text(config)
        self.process = subprocess.Popen(
            [tollgate_binary(), command, "--config", str(path), "--host", "127.0.0.1",
             "--port", str(self.port), "--debug-port", "0", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_listening(self.port, self.process)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """Stops the server at once, without releasing anything (a crash)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(PATIENCE)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                self.kill()


# Lease length 2 s, refresh every second: expiry comes soon after a server
# goes away. Learning mode off, so the first answer is a grant.
DOORMAN_CONFIG = """\
resources:
  - identifier_glob: "*"
    capacity: 100
    safe_capacity: 7
    algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1, learning_mode_duration: 0}
"""

QUOTA_CONFIG = """\
namespaces:
  svc:
    buckets:
      big: {size: 1000000, fill_rate: 1000000}
      slow: {size: 1, fill_rate: 2, wait_timeout_millis: 60000}
      tight: {size: 1, fill_rate: 0.001, wait_timeout_millis: 10, max_debt_millis: 10}
"""


@pytest.fixture
def doorman(tmp_path):
    server = Server("serve", DOORMAN_CONFIG, tmp_path)
    yield server
    server.stop()


@pytest.fixture
def quota(tmp_path):
    server = Server("quota", QUOTA_CONFIG, tmp_path)
    yield server
    server.stop()


@pytest.fixture
def dead_address() -> str:
    return f"127.0.0.1:{free_port()}"


def run_python(code: str, **kwargs) -> subprocess.Popen:
    """A Python subprocess running `code` with this interpreter."""
    return subprocess.Popen([sys.executable, "-c", code], **kwargs)
