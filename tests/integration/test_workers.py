"""``conch serve --workers 2``: two processes behind the same ports, statistics summed across them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable

import numpy as np
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
    while "serving (worker 1)" not in started.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    return started


def worker_pids(server: ServerProcess) -> list[int]:
    assert server.process is not None
    out = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def send(module: object, client: object, seed: int) -> None:
    a = np.random.default_rng(seed).random((2, 16), dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [2, 16], "FP32"), module.InferInput("INPUT1", [2, 16], "FP32")]  # type: ignore[attr-defined]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer("add-sub", inputs)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def test_two_workers_serve_both_protocols_and_their_statistics_add_up(server: ServerProcess) -> None:
    assert len(worker_pids(server)) == 2
    # Each new connection may land on either worker; 20 connections per protocol reach both.
    for seed in range(20):
        send(httpclient, httpclient.InferenceServerClient(server.http_url), seed)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            send(grpcclient, client, seed)

    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("add-sub")
    families = scrape(server.metrics_url)

    assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 40
    assert stats["model_stats"][0]["inference_count"] == 80
    assert families.value("nv_inference_request_success", model="add-sub") == 40
    assert families.value("nv_inference_count", model="add-sub") == 80


def test_sigterm_stops_the_supervisor_and_every_worker(server: ServerProcess) -> None:
    workers = worker_pids(server)

    assert server.stop(signal.SIGTERM) == 0
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=2)
