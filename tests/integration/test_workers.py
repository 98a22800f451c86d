"""``conch serve --workers 2`` (``CONCH_WORKERS``): two processes behind the same ports, each answering
the connections the kernel gives it, statistics summed across them."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

CONFIG = 'name: "add-sub"\nmax_batch_size: 8\n'


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("workers") / "models", {"add-sub": (add_sub_model(), CONFIG)}
    )
    started = start_server(root, "--workers", "2")
    deadline = time.monotonic() + 30
    # Either worker may come up first (worker 0 also prints the model table).
    while time.monotonic() < deadline and not (
        "serving (worker 0)" in started.log() and "serving (worker 1)" in started.log()
    ):
        time.sleep(0.1)
    assert "serving (worker 0)" in started.log() and "serving (worker 1)" in started.log(), started.log()
    return started


def worker_pids(server: ServerProcess) -> list[int]:
    assert server.process is not None
    out = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def holder(workers: list[int], server_port: int, client_port: int) -> int:
    """The worker whose socket is the server end of the client's connection from ``client_port``."""
    for pid in workers:
        for connection in psutil.Process(pid).net_connections("tcp"):
            if (
                connection.laddr.port == server_port
                and connection.raddr
                and connection.raddr.port == client_port
            ):
                return pid
    raise AssertionError(f"no worker holds the connection from port {client_port}")


def my_connections_to(port: int) -> set[int]:
    """Local ports of this process's established connections to ``port``."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    }


def rows(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((2, 16), dtype=np.float32)


def http_call(
    server: ServerProcess, seed: int, workers: list[int], headers: dict[str, str] | None = None
) -> int:
    """One request (with ``headers``) on a new HTTP connection; the worker that answered it."""
    a = rows(seed)
    body = {
        "inputs": [
            {"name": name, "shape": [2, 16], "datatype": "FP32", "data": a.ravel().tolist()}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request("POST", "/v2/models/add-sub/infer", json.dumps(body), headers or {})
        reply = connection.getresponse()
        answer = json.loads(reply.read())
        assert reply.status == 200, answer
        np.testing.assert_array_equal(np.array(answer["outputs"][0]["data"], np.float32), (a + a).ravel())
        # Still open (keep-alive): the socket at the server end belongs to the worker that answered.
        assert connection.sock is not None
        return holder(workers, server.http_port, connection.sock.getsockname()[1])
    finally:
        connection.close()


def grpc_call(server: ServerProcess, seed: int, workers: list[int]) -> int:
    """One request on a new gRPC channel; the worker that answered it."""
    a = rows(seed)
    earlier = my_connections_to(server.grpc_port)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput(name, [2, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add-sub", inputs).as_numpy("OUTPUT0"), a + a)
        (client_port,) = my_connections_to(server.grpc_port) - earlier
        return holder(workers, server.grpc_port, client_port)


def test_both_workers_answer_both_protocols_and_their_statistics_add_up(server: ServerProcess) -> None:
    workers = worker_pids(server)
    assert len(workers) == 2
    answered: dict[str, list[int]] = {"http": [], "grpc": []}
    # The kernel puts each new connection on either worker: 20 per protocol, more until both answered.
    for seed in range(60):
        answered["http"].append(http_call(server, seed, workers))
        answered["grpc"].append(grpc_call(server, seed, workers))
        if seed >= 19 and all(len(set(pids)) == 2 for pids in answered.values()):
            break
    sent = len(answered["http"])

    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("add-sub")
    families = scrape(server.metrics_url)

    assert set(answered["http"]) == set(workers), answered
    assert set(answered["grpc"]) == set(workers), answered
    assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 2 * sent
    assert stats["model_stats"][0]["inference_count"] == 4 * sent
    assert families.value("nv_inference_request_success", model="add-sub") == 2 * sent
    assert families.value("nv_inference_count", model="add-sub") == 4 * sent


def test_the_supervisor_page_merges_each_workers_own_families(server: ServerProcess) -> None:
    workers = worker_pids(server)
    before = scrape(server.metrics_url)
    fresh = "conch_data_freshness_seconds_count"
    earlier = before.samples(fresh, model="add-sub")
    answered = []
    stamp = {"conch-ingestion-timestamp": str(time.time() - 1.0)}
    for seed in range(60):
        answered.append(http_call(server, seed, workers, stamp))
        if len(answered) >= 10 and set(answered) == set(workers):
            break
    families = scrape(server.metrics_url)

    assert set(answered) == set(workers), answered
    # Counters and histograms: one series, the sum of both workers' counts.
    assert families.value(fresh, model="add-sub") == len(answered) + sum(s.value for s in earlier)
    assert families.value("conch_data_freshness_seconds_sum", model="add-sub") >= len(answered)
    assert families.value("conch_requests_total", protocol="http", code="200") >= len(answered)
    # Gauges: one series per worker.
    for index in ("0", "1"):
        assert families.value("conch_model_ready", model="add-sub", version="1", worker=index) == 1
    assert len(families.samples("conch_model_ready", model="add-sub")) == 2


def test_sigterm_stops_the_supervisor_and_every_worker(server: ServerProcess) -> None:
    workers = worker_pids(server)

    assert server.stop(signal.SIGTERM) == 0
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=2)


def test_conch_workers_variable_starts_that_many_workers(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), CONFIG)})
    server = ServerProcess(root, env={"CONCH_WORKERS": "2"}, console_script=True).start(tmp_path)
    try:
        workers = worker_pids(server)
        answered = {http_call(server, seed, workers) for seed in range(3)}
    finally:
        exit_code = server.stop()
    assert exit_code == 0
    assert len(workers) == 2
    assert answered <= set(workers)


def test_a_worker_that_dies_stops_the_server_with_an_error(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), CONFIG)})
    doomed = ServerProcess(root, ["--workers", "2"]).start(tmp_path)
    workers = worker_pids(doomed)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    assert doomed.process is not None
    doomed.process.wait(60)
    assert doomed.process.returncode == 1
    assert "a worker process stopped unexpectedly" in doomed.log()
    with pytest.raises(ProcessLookupError):
        os.kill(workers[1], 0)  # the other worker was stopped, and reaped
