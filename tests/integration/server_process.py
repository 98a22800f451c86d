"""Starts ``conch serve`` as a real subprocess on free loopback ports, as a user would run it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: Ports handed out lately: the kernel may give the same free port to two calls in a row, and a
#: server whose HTTP and gRPC ports are equal binds both (SO_REUSEPORT with --proxies or --workers)
#: and splits the connections between them: a gRPC client then meets the HTTP server (seen once in CI).
_HANDED_OUT: deque[int] = deque(maxlen=256)


def free_port() -> int:
    """A TCP port nobody listens on right now, and none of the last ones this process handed out."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port


class PortTaken(RuntimeError):
    """The server exited because one of its ports was taken between choosing and binding it."""


def conch_command() -> str:
    """The ``conch`` command that installing the package put beside this interpreter."""
    return str(Path(sys.executable).with_name("conch"))


@dataclass(frozen=True)
class HttpReply:
    """A raw HTTP answer, for what tritonclient does not show: status codes, headers, error bodies."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ServerProcess:
    """A running ``conch serve``; ``http_url`` and ``grpc_url`` are what tritonclient takes."""

    repository: Path | None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    log_path: Path | None = None
    #: False: pass host and ports as CONCH_* environment variables instead of command-line flags.
    port_flags: bool = True
    #: True: start the installed ``conch`` console script instead of ``python -m conch.cli.main``.
    console_script: bool = False
    #: The interpreter whose conch is started (another virtual environment's, for a fresh install).
    python: str = sys.executable
    #: For a server with ``--http-use-ssl``: the client context its liveness is asked with, over HTTPS.
    https: ssl.SSLContext | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, log_dir: Path, timeout: float = 60.0) -> ServerProcess:
        """Start the server and wait until its HTTP port answers ``/v2/health/live``.

        A port chosen free can be taken before the server binds it (a client's outgoing connection
        draws its local port from the same range): a server that exits because it cannot listen is
        started again on three new ports, twice at most.
        """
        for attempt in range(3):
            try:
                return self._start(log_dir, timeout)
            except PortTaken:
                if attempt == 2:
                    raise
                self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        raise AssertionError("unreachable")

    def _start(self, log_dir: Path, timeout: float) -> ServerProcess:
        script = str(Path(self.python).with_name("conch"))
        command = [script] if self.console_script else [self.python, "-m", "conch.cli.main"]
        command.append("serve")
        if self.repository is not None:
            command.append(str(self.repository))
        where = {
            "HOST": "127.0.0.1",
            "HTTP_PORT": str(self.http_port),
            "GRPC_PORT": str(self.grpc_port),
            "METRICS_PORT": str(self.metrics_port),
        }
        # Text logs unless a test asks otherwise: many read the server's log lines (json is the default
        # when stderr is not a terminal, as here).
        env = {"CONCH_LOG_FORMAT": "text", **os.environ, **self.env}
        if self.port_flags:
            for key, value in where.items():
                command += [f"--{key.lower().replace('_', '-')}", value]
        else:
            env.update({f"CONCH_{key}": value for key, value in where.items()})
        command += self.args
        self.log_path = log_dir / f"conch-{self.http_port}.log"
        log = self.log_path.open("w")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                failure = PortTaken if "conch: cannot listen on" in self.log() else RuntimeError
                raise failure(f"conch serve exited with {self.process.returncode}:\n{self.log()}")
            if self._live():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"conch serve did not become live in {timeout}s:\n{self.log()}")

    def _live(self) -> bool:
        try:
            # Over HTTPS by the name the test certificates carry (localhost), else by address.
            url = f"http://{self.http_url}/v2/health/live"
            context = self.https
            if context is not None:
                url = f"https://localhost:{self.http_port}/v2/health/live"
            with urllib.request.urlopen(url, timeout=1, context=context) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> HttpReply:
        """One plain HTTP/1.1 request to the HTTP port: ``request("GET", "/v2/health/ready").status``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            reply = connection.getresponse()
            return HttpReply(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
        finally:
            connection.close()

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Signal the server and wait for it to exit; returns its exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def processes_running(*arguments: bytes) -> list[int]:
    """The processes whose command line has every one of ``arguments`` as a whole argument (a model
    process's ``model.py``, a proxy's module name and port), found in ``/proc``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(argument in command for argument in arguments):
            found.append(int(entry.name))
    return found


def requests_counted(server: ServerProcess, protocol: str, code: str) -> float:
    """``conch_requests_total{protocol=PROTOCOL,code=CODE}`` as the metrics port shows it now."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        page = reply.read().decode()
    wanted = {"protocol": protocol, "code": code}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "conch_requests_total" and sample.labels == wanted:
                return float(sample.value)
    return 0.0
