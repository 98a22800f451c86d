"""Starts a real Prometheus as a subprocess that scrapes given targets every second, for the tests that
read conch's metrics the way a deployment does.

Its configuration, storage and log live in the folder the test gives (a temporary one), and it is
stopped when the ``with`` block ends, also when a test in it fails. Prometheus applies a new target set
about 5 s after it starts, so it is handed over only once it has scraped every target: from then on a
window of a few seconds holds samples.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.server_process import free_port

PROMETHEUS = shutil.which("prometheus")


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus and its HTTP API."""

    url: str

    def query(self, promql: str, at: float | None = None) -> list[dict[str, object]]:
        """``/api/v1/query``: the instant vector's samples, evaluated now or at ``at`` (Unix seconds)."""
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10
        ) as r:
            answer = json.load(r)
        assert answer["status"] == "success", answer
        assert answer["data"]["resultType"] == "vector", answer
        result: list[dict[str, object]] = answer["data"]["result"]
        return result

    def metadata(self) -> dict[str, list[dict[str, str]]]:
        """``/api/v1/metadata``: each metric family's type, help and unit, as read from the scrapes."""
        with urllib.request.urlopen(f"{self.url}/api/v1/metadata", timeout=10) as r:
            answer = json.load(r)
        assert answer["status"] == "success", answer
        metadata: dict[str, list[dict[str, str]]] = answer["data"]
        return metadata

    def scalar(self, promql: str, at: float | None = None) -> float:
        """The value of a query that must return exactly one sample."""
        result = self.query(promql, at)
        assert len(result) == 1, f"{promql} returned {result}"
        value = result[0]["value"]
        assert isinstance(value, list)
        return float(value[1])

    def wait_for(self, promql: str, expected: float, timeout: float = 15) -> None:
        """Until ``promql`` evaluates to ``expected`` (new scrapes arrive every second)."""
        deadline, seen = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                value = result[0]["value"]
                assert isinstance(value, list)
                seen = float(value[1])
                if seen == expected:
                    return
            time.sleep(0.25)
        pytest.fail(f"{promql} was {seen}, not {expected}, after {timeout}s")


@contextmanager
def running_prometheus(home: Path, targets: Sequence[str], job: str = "conch") -> Iterator[str]:
    """A Prometheus scraping ``targets`` (``host:port``) every second; yields its URL once every target
    has been scraped, then stops it."""
    assert PROMETHEUS is not None, "the prometheus binary is not installed"
    listed = ", ".join(f"'{target}'" for target in targets)
    config = home / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )
    port = free_port()
    command = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log_path = home / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=home, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, process, log_path)
        wait_until_scraped(url, len(targets), log_path)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 30) -> None:
    """Until Prometheus's ``/-/ready`` answers 200; fails with its log if it exits or never gets there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus was not ready after {timeout}s:\n{log_path.read_text()}")


def wait_until_scraped(url: str, targets: int, log_path: Path, timeout: float = 30) -> None:
    """Until ``up`` is 1 for ``targets`` targets: each has been scraped and answered."""
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': 'count(up == 1)'})}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(address, timeout=5) as reply:
            result = json.load(reply)["data"]["result"]
        if result and int(result[0]["value"][1]) == targets:
            return
        time.sleep(0.2)
    pytest.fail(f"prometheus had not scraped its {targets} targets after {timeout}s:\n{log_path.read_text()}")
