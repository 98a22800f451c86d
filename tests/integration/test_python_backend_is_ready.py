"""Triton's ``is_ready()`` hook: a Python model that says it is not ready is not ready on
``/v2/models/{m}/ready``, gRPC ``ModelReady`` and ``/v2/health/deep``, and ready again when it says
so; a flood of readiness probes makes about one call into the model's process a second."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures import python_models as models
from tests.integration.server_process import ServerProcess

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

#: Not ready while the file ``state`` beside its config exists: its text says how (``no``: returns
#: False, ``raise``: raises, ``text``: returns a string). ``execute`` answers how often is_ready ran.
FLIPS = """
import asyncio
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.state = os.path.join(args["model_repository"], "state")
        self.calls = 0
        self.lock = threading.Lock()

    def answer(self):
        with self.lock:
            self.calls += 1
        if not os.path.exists(self.state):
            return True
        how = open(self.state).read().strip()
        if how == "raise":
            raise RuntimeError("the cache is still warming")
        return "not yet" if how == "text" else False

    {definition}

    def execute(self, requests):
        calls = np.array([self.calls], np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("CALLS", calls)]) for _ in requests]
"""
SYNC = "def is_ready(self):\n        return self.answer()"
ASYNC = "async def is_ready(self):\n        await asyncio.sleep(0.01)\n        return self.answer()"
MODELS = {"flips": SYNC, "flips_async": ASYNC, "flips_text": SYNC}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-is-ready")
    for name, definition in MODELS.items():
        models.write_python_model(root, name, CONFIG.format(name=name), FLIPS.format(definition=definition))
    plain = models.ONE_IN_ONE_OUT.format(
        name="plain", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
    )
    models.write_python_model(root, "plain", plain, models.SLEEPY)
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, "--health-cache-secs", "0")


def _until(condition: Callable[[], bool], seconds: float = 15) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (asked every 0.2 s: readiness is cached 1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def _deep_check(server: ServerProcess, name: str) -> dict[str, object]:
    checks = server.request("GET", "/v2/health/deep").json()["checks"]
    return next(check for check in checks if check["name"] == f"model:{name}/1")


def follows_is_ready(
    server: ServerProcess,
    repository: Path,
    grpc_client: grpcclient.InferenceServerClient,
    name: str,
    how: str,
) -> str:
    """Model ``name`` says it is not ready (``how``), then ready again: HTTP and gRPC readiness and the
    deep check follow it both ways. The deep check's detail, for the caller to read."""
    state = repository / name / "state"
    http_ready = lambda: server.request("GET", f"/v2/models/{name}/ready").status == 200  # noqa: E731
    assert http_ready() and grpc_client.is_model_ready(name)
    state.write_text(how)
    try:
        assert _until(lambda: not http_ready()), f"{name}: HTTP model readiness did not follow is_ready()"
        assert server.request("GET", f"/v2/models/{name}/ready").status == 503
        assert not grpc_client.is_model_ready(name)
        assert _until(lambda: _deep_check(server, name)["status"] == "not_ready")
        detail = str(_deep_check(server, name)["detail"])
        assert server.request("GET", "/v2/health/deep").status == 200  # one model's word fails no server
    finally:
        state.unlink()
    assert _until(http_ready) and grpc_client.is_model_ready(name), f"{name}: not ready again"
    assert _deep_check(server, name)["status"] == "pass"
    return detail


def test_readiness_follows_is_ready(
    server: ServerProcess, repository: Path, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """Each way of saying "not ready" on its own model, sync and async hooks, all at once: each waits
    out the 1 s an answer is shared, twice, and they wait it together."""
    cases = [
        ("flips", "no", "returned False"),
        ("flips_async", "raise", "warming"),
        ("flips_text", "text", "str"),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        details = list(
            pool.map(lambda case: follows_is_ready(server, repository, grpc_client, *case[:2]), cases)
        )
    for (name, _, says), detail in zip(cases, details, strict=True):
        assert "reports itself not ready" in detail and says in detail, (name, detail)


def test_a_model_without_is_ready_is_ready_as_loaded(server: ServerProcess) -> None:
    assert server.request("GET", "/v2/models/plain/ready").status == 200


def test_a_flood_of_probes_makes_about_one_call_a_second(
    server: ServerProcess, grpc_client: grpcclient.InferenceServerClient
) -> None:
    def calls() -> int:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.zeros(1, np.int32))
        return int(grpc_client.infer("flips", [tensor]).as_numpy("CALLS")[0])

    before = calls()
    time.sleep(1.2)  # past the cached answer of the tests before: the flood needs a fresh one
    started = time.monotonic()

    def probe(_: int) -> int:
        return server.request("GET", "/v2/models/flips/ready").status

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(probe, range(400)))
    seconds = time.monotonic() - started
    assert statuses == [200] * 400
    made = calls() - before
    assert 1 <= made <= seconds / 1.0 + 2, f"{made} is_ready() calls for 400 probes in {seconds:.1f} s"
