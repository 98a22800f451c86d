"""Starts a real ``redis-server`` (Debian's package) on a free loopback port, for the stream tests.

Its data lives in the folder the test gives; without ``persist`` it keeps nothing on disk
(``--save "" --appendonly no``), with it an append-only file, so that a broker stopped and started
again still has its streams and groups. The server can be stopped and started again on the same
port, and is always stopped when the ``with`` block ends.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.fixtures.certificates import Certificates
from tests.integration.server_process import free_port

REDIS_SERVER = shutil.which("redis-server")


@dataclass
class RedisServer:
    """One redis-server; ``url`` is what ``streams.yaml``'s ``broker`` takes."""

    home: Path
    persist: bool = False
    extra: list[str] = field(default_factory=list)
    #: ``requirepass``: clients must give it (None: no password).
    password: str | None = None
    #: TLS only (``rediss://``), with these certificates (None: plain TCP).
    tls: Certificates | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        tls = {"ssl": True, "ssl_ca_certs": str(self.tls.ca)} if self.tls else {}
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=10, **tls)

    def start(self, timeout: float = 15) -> RedisServer:
        assert REDIS_SERVER is not None, "redis-server is not installed (make test installs it)"
        durability = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        )
        command = [
            REDIS_SERVER,
            "--bind",
            "127.0.0.1",
            *self._listening(),
            "--dir",
            str(self.home),
            "--save",
            "",
            *durability,
            "--protected-mode",
            "no",
            *(["--requirepass", self.password] if self.password else []),
            *self.extra,
        ]
        log = (self.home / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                if self.client().ping():
                    return self
            except redis.exceptions.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer in {timeout}s")

    def _listening(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            *("--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"),
            *("--tls-cert-file", str(self.tls.server_cert), "--tls-key-file", str(self.tls.server_key)),
            *("--tls-ca-cert-file", str(self.tls.ca)),
        ]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # SIGTERM: redis writes its append-only file and exits
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def running_redis(
    home: Path,
    persist: bool = False,
    extra: list[str] | None = None,
    password: str | None = None,
    tls: Certificates | None = None,
) -> Iterator[RedisServer]:
    """A started redis-server in ``home``; stopped when the block ends, also when a test fails."""
    home.mkdir(parents=True, exist_ok=True)
    server = RedisServer(home, persist, extra or [], password, tls).start()
    try:
        yield server
    finally:
        server.stop()
