"""An ONNX model with ``model_warmup`` is not READY, and answers no request, until its warm-up ran.

The model is loaded through the repository API while a prober asks for its readiness and sends it
inferences. Its warm-up is heavy (a second or more of matrix products on a core), so a version served
before its warm-up would answer inside the load, and one whose warm-up went on beside serving would
still burn a core after the load returned.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.onnx_models import slow_identity_model, write_repository
from tests.integration.server_process import ServerProcess

ROWS, RUNS = 8, 100
WARMING = f"""
name: "warming"
max_batch_size: {ROWS}
model_warmup [
  {{
    name: "heavy"
    batch_size: {ROWS}
    count: {RUNS}
    inputs {{ key: "INPUT0" value: {{ data_type: TYPE_FP32 dims: [ 4 ] random_data: true }} }}
  }}
]
"""


def process_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` (``/proc/PID/stat``: ONNX Runtime runs on its own threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def infer_body(rows: int) -> bytes:
    data = [1.0, 2.0, 3.0, 4.0] * rows
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [rows, 4], "data": data}]}
    ).encode()


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(tmp_path_factory.mktemp("warmup"), {"warming": (slow_identity_model(), WARMING)})
    return start_server(root, "--model-control-mode", "explicit")


def test_a_model_answers_nothing_and_is_not_ready_until_its_warmup_ran(server: ServerProcess) -> None:
    answers: list[tuple[float, float, str, int]] = []  # (when sent, when answered, what, status)
    loading = threading.Event()

    def probe() -> None:
        while not loading.is_set() and len(answers) < 10_000:
            sent = time.monotonic()
            ready = server.request("GET", "/v2/models/warming/ready").status
            answers.append((sent, time.monotonic(), "ready", ready))
            sent = time.monotonic()
            infer = server.request("POST", "/v2/models/warming/infer", infer_body(1)).status
            answers.append((sent, time.monotonic(), "infer", infer))
            time.sleep(0.005)

    prober = threading.Thread(target=probe)
    prober.start()
    loaded = server.request("POST", "/v2/repository/models/warming/load")
    returned = time.monotonic()
    loading.set()
    prober.join(30)
    assert server.process is not None
    time.sleep(0.1)
    cpu_before = process_cpu_s(server.process.pid)
    time.sleep(0.5)
    cpu_after_load = process_cpu_s(server.process.pid) - cpu_before

    assert loaded.status == 200, loaded.body
    # A warm-up still running after the load would burn a core; an idle server burns next to nothing.
    assert cpu_after_load < 0.15, f"{cpu_after_load:.2f} s of CPU in the 0.5 s after the load returned"
    # While the model loaded and warmed up, nothing answered 200 (the swap is a moment before the load's
    # own answer, so the last quarter second is left out).
    during = [(what, status) for _, answered, what, status in answers if answered < returned - 0.25]
    assert len(during) >= 4, "the prober saw too little of the load to judge it"
    assert all(status != 200 for _, status in during), during
    assert server.request("POST", "/v2/models/warming/infer", infer_body(1)).status == 200
