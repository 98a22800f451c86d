"""Python models' processes: a dead one fails only its own in-flight requests, restarts by itself, and
a model that can no longer start ends UNAVAILABLE; the server and the other models keep serving."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures import python_models as models
from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.server_process import ServerProcess, processes_running

#: Fails ``initialize`` once the file ``refuse`` exists next to the model's folder.
REFUSING_LATER = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(args["model_repository"], "refuse")):
            raise RuntimeError("refused to start again")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""

#: Ends its own process when IN[0] is 13 (a crash the model causes itself).
EXITING = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0] == 13:
                os._exit(3)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


def _config(name: str) -> str:
    return models.ONE_IN_ONE_OUT.format(name=name, max_batch_size=0, dtype="TYPE_FP32", instances=1, extra="")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-processes")
    write_repository(root, {"onnx_add_sub": (add_sub_model(), None)})
    models.write_python_model(root, "sleepy", _config("sleepy"), models.SLEEPY)
    models.write_python_model(root, "exiting", _config("exiting"), EXITING)
    models.write_python_model(root, "refusing", _config("refusing"), REFUSING_LATER)
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository)


def _model_pids(model_folder: Path) -> list[int]:
    """The model processes serving ``model_folder`` (their command line names its model.py)."""
    return processes_running(str(model_folder / "1" / "model.py").encode())


def _call(client: httpclient.InferenceServerClient, model: str, value: float) -> str:
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
    try:
        client.infer(model, [tensor])
        return "ok"
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"


def _onnx_call(client: httpclient.InferenceServerClient) -> str:
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    try:
        client.infer("onnx_add_sub", inputs)
        return "ok"
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"


def _wait_ok(client: httpclient.InferenceServerClient, model: str, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if _call(client, model, 1.0) == "ok":
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{model} did not serve again within {seconds} s")


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"the condition did not hold within {seconds} s"
        time.sleep(0.001)


def test_sigkill_mid_traffic_fails_only_in_flight_requests(server: ServerProcess, repository: Path) -> None:
    sleepy_results: list[str] = []
    onnx_results: list[str] = []
    stop = threading.Event()
    #: When the sleepy call now in progress was sent (None between calls).
    sleepy_sent: list[float | None] = [None]

    def traffic(
        results: list[str],
        call: Callable[[httpclient.InferenceServerClient], str],
        sent: list[float | None] | None = None,
    ) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            while not stop.is_set():
                if sent is not None:
                    sent[0] = time.monotonic()
                results.append(call(client))
                if sent is not None:
                    sent[0] = None

    threads = [
        threading.Thread(
            target=traffic, args=(sleepy_results, lambda c: _call(c, "sleepy", 30.0), sleepy_sent)
        ),
        threading.Thread(target=traffic, args=(onnx_results, _onnx_call)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    (pid,) = _model_pids(repository / "sleepy")
    # Kill while a 30 ms call sleeps in the model, not in the gap between two calls: on a busy machine
    # the client's turn-around between calls is long enough for a blind kill to land in it. 10 ms after
    # sending leaves the call time to reach the model; the GIL may delay the kill by 5 ms more, still
    # inside the 30 ms sleep.
    _wait_for(lambda: (sent := sleepy_sent[0]) is not None and 0.010 <= time.monotonic() - sent <= 0.020)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    with httpclient.InferenceServerClient(server.http_url) as client:
        recovered = _wait_ok(client, "sleepy", 15.0)
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join()

    failures = [r for r in sleepy_results if r != "ok"]
    assert 1 <= len(failures) <= 2, failures  # the one in flight (and at most one racing the death)
    assert all(f.startswith("503 ") and "was killed by SIGKILL" in f for f in failures), failures
    assert sleepy_results[-1] == "ok" and sleepy_results.count("ok") > 5
    assert onnx_results and all(r == "ok" for r in onnx_results)  # the other model never noticed
    assert recovered < 15.0 and time.monotonic() - killed_at < 15.0
    (new_pid,) = _model_pids(repository / "sleepy")
    assert new_pid != pid
    index = {e["name"]: e for e in server.request("POST", "/v2/repository/index").json()}
    assert index["sleepy"]["state"] == "READY"
    assert "restarted 1 time(s)" in index["sleepy"]["reason"] and "SIGKILL" in index["sleepy"]["reason"]


def test_a_model_that_ends_its_own_process_recovers(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        failed = _call(client, "exiting", 13.0)
        assert failed.startswith("503 ") and "exited with code 3" in failed
        assert "Traceback" not in failed and "/" not in failed.split("503 ", 1)[1].split(";")[0]
        _wait_ok(client, "exiting", 15.0)
        assert _onnx_call(client) == "ok"
    assert server.process is not None and server.process.poll() is None


def test_a_model_that_cannot_restart_ends_unavailable(server: ServerProcess, repository: Path) -> None:
    (repository / "refusing" / "refuse").touch()
    (pid,) = _model_pids(repository / "refusing")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    entry: dict[str, str] = {}
    while time.monotonic() < deadline:
        entry = {e["name"]: e for e in server.request("POST", "/v2/repository/index").json()}["refusing"]
        if entry["state"] == "UNAVAILABLE":
            break
        time.sleep(0.2)
    assert entry["state"] == "UNAVAILABLE"
    assert "cannot restart" in entry["reason"] and "RuntimeError: refused to start again" in entry["reason"]
    with httpclient.InferenceServerClient(server.http_url) as client:
        refused = _call(client, "refusing", 1.0)
        assert refused.startswith("503 ") or refused.startswith("400 "), refused
        assert _onnx_call(client) == "ok"
    assert _model_pids(repository / "refusing") == []
