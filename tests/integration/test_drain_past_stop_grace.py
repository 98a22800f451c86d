"""SIGTERM with work in flight that takes longer than the HTTP and gRPC servers' own stop grace.

The server drains first (docs/lifecycle.md): readiness turns 503, and the requests already inside
finish, for up to ``--exit-timeout-secs``; only then do the listeners close, each with its own short
stop grace (``STOP_GRACE_SECS`` for HTTP, the same for gRPC). So a request that runs past that grace,
but within the exit timeout, must still be answered, over HTTP and over gRPC.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch.http_server.server import STOP_GRACE_SECS
from tests.fixtures import python_models as models
from tests.integration.server_process import ServerProcess

#: How long each request runs on once the server is signalled: past the stop grace, well within the
#: exit timeout.
PAST_SIGNAL_S = STOP_GRACE_SECS + 1.0

#: Marks its start in ``started`` beside its config, runs until the test writes ``signalled`` there,
#: then IN[0] milliseconds more, and echoes IN: so each request is known to be inside, and ends a known
#: time after the signal however late it came in.
UNTIL_SIGNALLED = """
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            with open(os.path.join(self.folder, "started"), "a") as started:
                started.write("1\\n")
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(self.folder, "signalled")) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(float(value.reshape(-1)[0]) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("drain")
    config = models.ONE_IN_ONE_OUT.format(
        name="sleepy", max_batch_size=0, dtype="TYPE_FP32", instances=2, extra=""
    )
    models.write_python_model(root, "sleepy", config, UNTIL_SIGNALLED)
    return root


def wait_ready(server: ServerProcess) -> None:
    deadline = time.monotonic() + 60
    while server.request("GET", "/v2/health/ready").status != 200:
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.2)


def test_requests_running_past_the_stop_grace_are_answered_before_the_server_exits(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    server = start_server(repository, "--exit-timeout-secs", "30")
    wait_ready(server)
    value = np.full([1], PAST_SIGNAL_S * 1000, np.float32)
    results: dict[str, Any] = {}
    finished: dict[str, float] = {}

    def over_http() -> None:
        request = httpclient.InferInput("IN", [1], "FP32")
        request.set_data_from_numpy(value)
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60, connection_timeout=60)
        try:
            results["http"] = client.infer("sleepy", [request]).as_numpy("OUT")
        except Exception as exc:
            results["http"] = exc
        finished["http"] = time.monotonic()

    def over_grpc() -> None:
        request = grpcclient.InferInput("IN", [1], "FP32")
        request.set_data_from_numpy(value)
        try:
            with grpcclient.InferenceServerClient(server.grpc_url) as client:
                results["grpc"] = client.infer("sleepy", [request], client_timeout=60).as_numpy("OUT")
        except Exception as exc:
            results["grpc"] = exc
        finished["grpc"] = time.monotonic()

    threads = [threading.Thread(target=over_http), threading.Thread(target=over_grpc)]
    for thread in threads:
        thread.start()
    started = repository / "sleepy" / "started"
    deadline = time.monotonic() + 30
    while not (started.exists() and len(started.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.02)  # until both requests are inside the model, one on each instance
    assert len(started.read_text().split()) == 2, server.log()[-2000:]
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    (repository / "sleepy" / "signalled").touch()
    time.sleep(0.3)
    during = server.request("GET", "/v2/health/ready")
    for thread in threads:
        thread.join(60)
    code = server.process.wait(60)

    assert during.status == 503
    assert {name: np.asarray(result).tolist() for name, result in results.items()} == {
        "http": [PAST_SIGNAL_S * 1000],
        "grpc": [PAST_SIGNAL_S * 1000],
    }, results
    # Both answers came after the servers' own stop grace would have run out, counted from the signal.
    assert min(finished.values()) - signalled > STOP_GRACE_SECS
    assert code == 0
