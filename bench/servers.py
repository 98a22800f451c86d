"""A server under test as a subprocess: free loopback ports, readiness, statistics, a clean stop.

Every server (conch, Triton, MLServer, naive) speaks KServe V2's ``/v2/health/ready`` over HTTP, so one
class starts, waits for and stops them all; what differs is the command line, built in ``peers.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ServerError(RuntimeError):
    """The server did not become ready; the message ends with the tail of its log."""


def free_port() -> int:
    """A TCP port nobody listens on right now on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Ports:
    """The three ports a V2 server listens on; metrics is unused by MLServer's REST-only runs."""

    http: int = field(default_factory=free_port)
    grpc: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc}"


@dataclass
class ServerProcess:
    """``command`` started in its own process group, output to ``log_path``; a context manager."""

    name: str
    command: Sequence[str]
    ports: Ports
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_timeout_s: float = 120.0
    process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the command and wait until ``/v2/health/ready`` answers 200."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                list(self.command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        url = f"{self.ports.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.process.returncode}\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise ServerError(f"{self.name} not ready after {self.ready_timeout_s:.0f} s\n{self.log_tail()}")

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group (Triton's stubs, MLServer's workers too), SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        _signal_group(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(group, signal.SIGKILL)
            self.process.wait()
        # Children that outlive the leader (stub processes) still carry the group id.
        _signal_group(group, signal.SIGKILL)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the server's output, for error messages."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def post_json(self, path: str, body: bytes) -> Any:
        """POST ``body`` to ``path`` and decode the JSON answer (the harness's own sanity request)."""
        request = urllib.request.Request(
            f"{self.ports.http_url}{path}", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30.0) as reply:
            return json.loads(reply.read())

    def get_json(self, path: str) -> Any:
        """GET ``path`` and decode the JSON answer."""
        with urllib.request.urlopen(f"{self.ports.http_url}{path}", timeout=10.0) as reply:
            return json.loads(reply.read())


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, sig)


@dataclass(frozen=True)
class StatsReading:
    """Two of a model's V2 statistics at one moment: ``compute_infer`` (the model's own time) and
    ``success`` (each request's whole time inside the server), as (requests counted, nanoseconds)."""

    compute: tuple[int, int]
    request: tuple[int, int]
    #: Rows inferred and model executions so far (their quotient is the mean batch).
    inferences: int = 0
    executions: int = 0

    def since(self, earlier: StatsReading) -> ServerTimes:
        """Mean times per request between ``earlier`` and this reading."""
        return ServerTimes(
            _per_request_ms(self.compute, earlier.compute), _per_request_ms(self.request, earlier.request)
        )


@dataclass(frozen=True)
class ServerTimes:
    """What the server says a request cost, in ms: the model's compute, and the whole request; and
    what it cost the machine, in CPU microseconds per request: the server's process and its children
    (conch's and Triton's python model processes)."""

    compute_ms: float | None = None
    request_ms: float | None = None
    server_cpu_us: float | None = None
    children_cpu_us: float | None = None


def _per_request_ms(later: tuple[int, int], earlier: tuple[int, int]) -> float | None:
    count = later[0] - earlier[0]
    return (later[1] - earlier[1]) / count / 1e6 if count > 0 else None


def stats_reading(server: ServerProcess, model: str) -> StatsReading | None:
    """The model's statistics from ``/v2/models/MODEL/stats``, or None where there is no such API."""
    try:
        stats = server.get_json(f"/v2/models/{model}/stats")
        model_stats = stats["model_stats"][0]
        inference = model_stats["inference_stats"]
        compute, success = inference["compute_infer"], inference["success"]
        return StatsReading(
            (int(compute["count"]), int(compute["ns"])),
            (int(success["count"]), int(success["ns"])),
            int(model_stats.get("inference_count", 0)),
            int(model_stats.get("execution_count", 0)),
        )
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError):
        return None


def measure_between(server: ServerProcess, model: str, action: Callable[[], Any]) -> tuple[Any, ServerTimes]:
    """Run ``action`` and return its result with the server's own times per request meanwhile, and
    the CPU its processes spent per request (requests as the server counted them)."""
    before, cpu_before = stats_reading(server, model), cpu_reading(server)
    result = action()
    after, cpu_after = stats_reading(server, model), cpu_reading(server)
    if before is None or after is None:
        return result, ServerTimes()
    times = after.since(before)
    requests = after.request[0] - before.request[0]
    if requests <= 0 or cpu_before is None or cpu_after is None:
        return result, times
    per_request = [
        (later - earlier) / requests * 1e6 for later, earlier in zip(cpu_after, cpu_before, strict=True)
    ]
    return result, replace(times, server_cpu_us=per_request[0], children_cpu_us=per_request[1])


def cpu_reading(server: ServerProcess) -> tuple[float, float] | None:
    """CPU seconds (user + system) so far of the server's process and of its live children, from
    ``/proc`` (None where there is none: not Linux, or the server is gone)."""
    if server.process is None:
        return None
    pid = server.process.pid
    own, children = None, 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        read = _parent_and_cpu_seconds(stat)
        if read is None:
            continue
        parent, seconds = read
        if stat.parent.name == str(pid):
            own = seconds
        elif parent == pid:
            children += seconds
    return None if own is None else (own, children)


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) so far of process ``pid``; None where unknown."""
    read = _parent_and_cpu_seconds(Path(f"/proc/{pid}/stat"))
    return None if read is None else read[1]


def _parent_and_cpu_seconds(stat: Path) -> tuple[int, float] | None:
    """A process's parent id and CPU seconds from its ``/proc/PID/stat``; None if it is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None
