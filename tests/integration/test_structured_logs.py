"""``conch serve --log-format``: JSON lines a log collector can read, or text; and the model figures
(readiness, loads) on the metrics page of the same server.

The server runs with stderr apart from stdout, because the JSON promise is about the log (stderr);
the start-up table is printed on stdout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from tests.fixtures.onnx_models import add_sub_model, identity_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import free_port

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
ISO_UTC_MILLISECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@dataclass
class LoggedServer:
    """A ``conch serve`` whose stderr (the log) and stdout are kept in separate files."""

    process: subprocess.Popen[bytes]
    stderr_path: Path
    http_port: int
    metrics_port: int
    grpc_port: int = 0

    def log_lines(self) -> list[str]:
        return self.stderr_path.read_text(encoding="utf-8").splitlines()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return int(self.process.wait())


def start_logged_server(
    repository: Path, log_dir: Path, *args: str, env: dict[str, str] | None = None
) -> LoggedServer:
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    command += ["--metrics-port", str(metrics_port), *args]
    stderr_path = log_dir / f"conch-{http_port}.stderr"
    with stderr_path.open("wb") as stderr, (log_dir / f"conch-{http_port}.stdout").open("wb") as stdout:
        environment = {**_environment(), **(env or {})}
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=environment)
    server = LoggedServer(process, stderr_path, http_port, metrics_port, grpc_port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"conch serve exited with {process.returncode}:\n{stderr_path.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/live", timeout=1):
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"conch serve did not become live:\n{stderr_path.read_text()}")


def _environment() -> dict[str, str]:
    """This process's environment without ``CONCH_*`` settings, which would change what is tested."""
    return {key: value for key, value in os.environ.items() if not key.startswith("CONCH_")}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``good`` loads; ``broken``'s only version is not an ONNX file."""
    root = write_repository(
        tmp_path_factory.mktemp("structured") / "models",
        {"good": (add_sub_model(), None), "broken": (identity_model(TensorProto.FLOAT), None)},
    )
    (root / "broken" / "1" / "model.onnx").write_bytes(np.random.default_rng(9).bytes(512))
    return root


@pytest.fixture(scope="module")
def json_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedServer]:
    server = start_logged_server(repository, tmp_path_factory.mktemp("logs"), "--log-format", "json")
    yield server
    server.stop()


def json_records(lines: list[str]) -> list[dict[str, Any]]:
    """Every line parsed; fails naming the first line that is not one JSON object."""
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"log line is not JSON: {line!r}")
        assert isinstance(record, dict), line
        records.append(record)
    return records


def about(records: list[dict[str, Any]], model: str, event: str) -> list[dict[str, Any]]:
    """The ``event`` records whose ``model`` field is ``model``."""
    return [r for r in records if r.get("event") == event and r.get("model") == model]


def repository_index(port: int) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        index: list[dict[str, Any]] = json.loads(reply.read())
    return index


def test_every_log_line_is_a_json_object_with_time_level_logger_and_message(
    json_server: LoggedServer,
) -> None:
    records = json_records(json_server.log_lines())

    assert len(records) >= 4
    for record in records:
        assert ISO_UTC_MILLISECONDS.match(record["time"]), record
        assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), record
        assert record["logger"] and isinstance(record["message"], str), record
    assert any(r["message"].startswith("loading model repository ") for r in records)
    serving = [
        r
        for r in records
        if r["logger"] == "conch.runtime.model_process" and r["message"].startswith("serving: HTTP")
    ]
    assert serving, records


def test_both_models_load_records_are_there_with_their_fields(json_server: LoggedServer) -> None:
    records = json_records(json_server.log_lines())
    reason = next(e["reason"] for e in repository_index(json_server.http_port) if e["name"] == "broken")

    (good,) = about(records, "good", "model_loaded")
    assert (good["level"], good["ready"], good["unavailable"]) == ("INFO", [1], [])
    assert isinstance(good["seconds"], float) and good["seconds"] >= 0
    (broken,) = about(records, "broken", "model_loaded")
    assert (broken["ready"], broken["unavailable"]) == ([], [1])
    (failure,) = about(records, "broken", "version_unavailable")
    assert (failure["level"], failure["version"]) == ("ERROR", 1)
    assert "not a loadable ONNX model" in reason and failure["reason"] == reason
    assert not about(records, "good", "version_unavailable")


def test_the_http_servers_records_come_out_as_json_too(json_server: LoggedServer) -> None:
    with socket.create_connection(("127.0.0.1", json_server.http_port), timeout=5) as connection:
        connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        connection.recv(1024)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        records = json_records(json_server.log_lines())
        http = [r for r in records if r["logger"] == "conch.http_server"]
        if http:
            break
        time.sleep(0.1)
    assert [(r["level"], r["message"]) for r in http] == [("WARNING", "Invalid HTTP request received.")]


def test_model_ready_is_one_for_the_good_version_and_zero_for_the_broken_one(
    json_server: LoggedServer,
) -> None:
    page = scrape(f"http://127.0.0.1:{json_server.metrics_port}/metrics")

    assert page.families["conch_model_ready"].type == "gauge"
    assert page.value("conch_model_ready", model="good", version="1") == 1
    assert page.value("conch_model_ready", model="broken", version="1") == 0
    assert len(page.samples("conch_model_ready")) == 2


def test_loads_are_counted_by_result_and_timed_once_each(json_server: LoggedServer) -> None:
    page = scrape(f"http://127.0.0.1:{json_server.metrics_port}/metrics")

    assert page.value("conch_model_loads_total", model="good", result="success") == 1
    assert page.value("conch_model_loads_total", model="good", result="failure") == 0
    assert page.value("conch_model_loads_total", model="broken", result="success") == 0
    assert page.value("conch_model_loads_total", model="broken", result="failure") == 1
    for model in ("good", "broken"):
        assert page.value("conch_model_load_duration_seconds_count", model=model) == 1
        seconds = page.value("conch_model_load_duration_seconds_sum", model=model)
        assert 0 < seconds < 60, (model, seconds)
        (loaded,) = about(json_records(json_server.log_lines()), model, "model_loaded")
        assert abs(seconds - loaded["seconds"]) < 0.0006, (seconds, loaded)  # the event rounds to ms
        buckets = page.buckets("conch_model_load_duration_seconds", model=model)
        assert buckets[0][0] == 0.05 and buckets[-2][0] == 300.0 and buckets[-1] == (float("inf"), 1)


def test_conch_log_format_text_gives_text_lines(repository: Path, tmp_path: Path) -> None:
    server = start_logged_server(repository, tmp_path, env={"CONCH_LOG_FORMAT": "text"})
    assert server.stop() == 0
    lines = server.log_lines()

    records = [line for line in lines if TEXT_LINE.match(line)]
    assert any(" INFO conch.runtime.model_process: loading model repository " in line for line in records), (
        lines
    )
    assert any(" ERROR " in line and "model=broken version=1" in line for line in records), lines
    assert any(line.endswith(" INFO conch.runtime.model_process: stopped") for line in records), lines
    assert not any(line.startswith("{") for line in lines), lines


def test_an_unknown_log_format_exits_2_listing_the_values(repository: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--log-format", "xml"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environment(),
    )

    assert done.returncode == 2
    assert "--log-format: expected one of auto, json, text, got 'xml'" in done.stderr
