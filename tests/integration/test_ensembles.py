"""Ensembles (``platform: "ensemble"``) end to end: a real server, tritonclient over HTTP and gRPC.

The main ensemble is a diamond of ONNX steps, each an ordinary model of the repository:

    X -> double -> D;  D -> triple -> T;  D -> negate -> N;  (T, N) -> add_sub -> SUM, DIFF

so SUM = 6x - 2x = 4x and DIFF = 6x + 2x = 8x. Beside it, ensembles that fail in each way a user
meets: a step that refuses the request (400) or fails while running (500), a step model that is not
loaded (503), a step loaded after the ensemble that disagrees with it (503 at its first request),
and configs refused at load (UNAVAILABLE with the reason in the index).
"""

from __future__ import annotations

import json
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
from tritonclient.utils import InferenceServerException

from tests.fixtures.ensembles import add_sub_step, ensemble_config, scale_step, write_ensemble
from tests.fixtures.onnx_models import counting_loop_model, reshape_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

X4 = ("X", "TYPE_FP32", [4])
DIAMOND = [
    ("double", {"INPUT0": "X"}, {"OUTPUT0": "D"}),
    ("triple", {"INPUT0": "D"}, {"OUTPUT0": "T"}),
    ("negate", {"INPUT0": "D"}, {"OUTPUT0": "N"}),
    ("add_sub", {"INPUT0": "T", "INPUT1": "N"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
]
STEP_MODELS = ("double", "triple", "negate", "add_sub")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_repository(
        tmp_path_factory.mktemp("ensembles") / "models",
        {
            "double": (scale_step(2.0), None),
            "triple": (scale_step(3.0), None),
            "negate": (scale_step(-1.0), None),
            "add_sub": (add_sub_step(), None),
            "target_shape": (reshape_model(), None),
        },
    )
    ensembles = {
        "pipeline": ensemble_config(
            "pipeline",
            [X4],
            [("SUM", "TYPE_FP32", [4]), ("DIFF", "TYPE_FP32", [4])],
            DIAMOND,
            max_batch_size=4,
        ),
        # Any width: the ensemble lets a width of 5 through, and its step 'double' refuses it.
        "loose": ensemble_config(
            "loose",
            [("X", "TYPE_FP32", [-1])],
            [("Y", "TYPE_FP32", [-1])],
            [("double", {"INPUT0": "X"}, {"OUTPUT0": "Y"})],
            max_batch_size=4,
        ),
        "reshaper": ensemble_config(
            "reshaper",
            [("X", "TYPE_FP32", [4]), ("SHAPE", "TYPE_INT64", [2])],
            [("Y", "TYPE_FP32", [-1, -1])],
            [("target_shape", {"X": "X", "SHAPE": "SHAPE"}, {"Y": "Y"})],
        ),
        "orphan": ensemble_config(
            "orphan", [X4], [("Y", "TYPE_FP32", [4])], [("missing_model", {"INPUT0": "X"}, {"OUTPUT0": "Y"})]
        ),
        # Loads before 'double' (name order), so only its first request can find the INT32/FP32 clash.
        "a_late_check": ensemble_config(
            "a_late_check",
            [("X", "TYPE_INT32", [4])],
            [("Y", "TYPE_FP32", [4])],
            [("double", {"INPUT0": "X"}, {"OUTPUT0": "Y"})],
        ),
        "wrong_type": ensemble_config(
            "wrong_type",
            [("X", "TYPE_INT32", [4])],
            [("Y", "TYPE_FP32", [4])],
            [("double", {"INPUT0": "X"}, {"OUTPUT0": "Y"})],
        ),
        "wide_batch": ensemble_config(
            "wide_batch",
            [X4],
            [("Y", "TYPE_FP32", [4])],
            [("double", {"INPUT0": "X"}, {"OUTPUT0": "Y"})],
            max_batch_size=8,
        ),
        "ring": ensemble_config(
            "ring",
            [X4],
            [("Y", "TYPE_FP32", [4])],
            [
                ("add_sub", {"INPUT0": "X", "INPUT1": "B"}, {"OUTPUT0": "A", "OUTPUT1": "Y"}),
                ("double", {"INPUT0": "A"}, {"OUTPUT0": "B"}),
            ],
        ),
    }
    for name, config in ensembles.items():
        write_ensemble(root, name, config)
    return root


def http_x(x: np.ndarray) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def grpc_x(x: np.ndarray) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((count, 4), dtype=np.float32)


def successes(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def failures(client: httpclient.InferenceServerClient, model: str) -> int:
    return int(client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]["fail"]["count"])


def post_infer(server: ServerProcess, model: str, inputs: list[dict[str, Any]]) -> tuple[int, str]:
    reply = server.request("POST", f"/v2/models/{model}/infer", json.dumps({"inputs": inputs}).encode())
    return reply.status, reply.json().get("error", "")


def test_the_diamond_computes_what_numpy_does_over_http_and_grpc(
    http_client: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    x = rows(3)
    answer = http_client.infer("pipeline", http_x(x))
    np.testing.assert_allclose(answer.as_numpy("SUM"), 4 * x, rtol=1e-6)
    np.testing.assert_allclose(answer.as_numpy("DIFF"), 8 * x, rtol=1e-6)
    response = answer.get_response()
    assert sorted(o["name"] for o in response["outputs"]) == ["DIFF", "SUM"], "no intermediate tensor"
    assert (response["model_name"], response["model_version"]) == ("pipeline", "1")
    assert answer.as_numpy("SUM").shape == (3, 4), "the batch dimension passes through every step"

    over_grpc = grpc_client.infer("pipeline", grpc_x(x))
    np.testing.assert_allclose(over_grpc.as_numpy("DIFF"), 8 * x, rtol=1e-6)
    assert sorted(o.name for o in over_grpc.get_response().outputs) == ["DIFF", "SUM"]


def test_only_the_requested_outputs_come_back(
    http_client: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    x = rows(2, seed=1)
    answer = http_client.infer("pipeline", http_x(x), outputs=[httpclient.InferRequestedOutput("DIFF")])
    assert [o["name"] for o in answer.get_response()["outputs"]] == ["DIFF"]
    np.testing.assert_allclose(answer.as_numpy("DIFF"), 8 * x, rtol=1e-6)
    over_grpc = grpc_client.infer("pipeline", grpc_x(x), outputs=[grpcclient.InferRequestedOutput("SUM")])
    assert [o.name for o in over_grpc.get_response().outputs] == ["SUM"]
    with pytest.raises(InferenceServerException, match="unexpected inference output 'D'"):
        http_client.infer("pipeline", http_x(x), outputs=[httpclient.InferRequestedOutput("D")])


def test_each_step_counts_in_its_own_models_statistics_and_the_ensemble_in_its_own(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    before = {name: successes(http_client, name) for name in ("pipeline", *STEP_MODELS)}
    inferences_before = http_client.get_inference_statistics("pipeline")["model_stats"][0]["inference_count"]
    metric_before = scrape(server.metrics_url).value(
        "nv_inference_request_success", model="pipeline", version="1"
    )
    for seed in range(5):
        http_client.infer("pipeline", http_x(rows(2, seed)))
    after = {name: successes(http_client, name) for name in ("pipeline", *STEP_MODELS)}
    assert {name: after[name] - before[name] for name in after} == dict.fromkeys(after, 5)
    stats = http_client.get_inference_statistics("pipeline")["model_stats"][0]
    assert stats["inference_count"] - inferences_before == 10, "rows, as for any model"
    page = scrape(server.metrics_url)
    assert page.value("nv_inference_request_success", model="pipeline", version="1") - metric_before == 5
    assert page.value("nv_inference_count", model="pipeline", version="1") >= 10


def test_a_step_that_refuses_the_request_is_named_and_its_400_kept(
    server: ServerProcess,
    http_client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    failed_before = (failures(http_client, "loose"), failures(http_client, "double"))
    five_wide = {"name": "X", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}
    status, error = post_infer(server, "loose", [five_wide])
    assert status == 400
    assert error.startswith("ensemble 'loose' step 0 (model 'double'): "), error
    assert "[1,5]" in error.replace(" ", ""), "the step's own message follows"
    with pytest.raises(InferenceServerException) as raised:
        grpc_client.infer("loose", grpc_x(np.ones((1, 5), np.float32)))
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "ensemble 'loose' step 0 (model 'double')" in raised.value.message()
    assert (failures(http_client, "loose"), failures(http_client, "double")) == (
        failed_before[0] + 2,
        failed_before[1] + 2,
    )


def test_a_step_that_fails_while_running_is_named_and_its_500_kept(server: ServerProcess) -> None:
    x = {"name": "X", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    status, error = post_infer(
        server, "reshaper", [x, {"name": "SHAPE", "shape": [2], "datatype": "INT64", "data": [3, 3]}]
    )
    assert status == 500
    assert error.startswith("ensemble 'reshaper' step 0 (model 'target_shape'): model 'target_shape'"), error
    assert "/" not in error, "no source paths"
    ok, _ = post_infer(
        server, "reshaper", [x, {"name": "SHAPE", "shape": [2], "datatype": "INT64", "data": [2, 2]}]
    )
    assert ok == 200


def test_a_step_model_that_is_not_loaded_answers_503_naming_it(server: ServerProcess) -> None:
    status, error = post_infer(
        server, "orphan", [{"name": "X", "shape": [4], "datatype": "FP32", "data": [0] * 4}]
    )
    assert status == 503
    assert error.startswith(
        "ensemble 'orphan' step 'missing_model' is not available: no model 'missing_model' is loaded"
    ), error


def test_a_step_loaded_after_the_ensemble_is_checked_before_its_first_request(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    assert http_client.is_model_ready("a_late_check"), "its step was not loaded yet when it loaded"
    status, error = post_infer(
        server, "a_late_check", [{"name": "X", "shape": [4], "datatype": "INT32", "data": [1, 2, 3, 4]}]
    )
    assert status == 503
    assert error.startswith(
        "ensemble 'a_late_check' tensor 'X' is TYPE_INT32 for ensemble input 'X' but TYPE_FP32 for step 0 "
        "(model 'double') input 'INPUT0'"
    ), error


def test_bad_ensembles_are_unavailable_with_a_reason_in_the_index(
    http_client: httpclient.InferenceServerClient,
) -> None:
    index = {entry["name"]: entry for entry in http_client.get_model_repository_index()}
    reasons = {name: index[name]["reason"] for name in ("wrong_type", "wide_batch", "ring")}
    assert {index[name]["state"] for name in reasons} == {"UNAVAILABLE"}
    assert reasons["wrong_type"].startswith(
        "ensemble 'wrong_type' tensor 'X' is TYPE_INT32 for ensemble input"
    )
    assert reasons["wide_batch"] == (
        "ensemble 'wide_batch' has max_batch_size 8 but its step 0 (model 'double') accepts at most 4 rows; "
        "lower the ensemble's max_batch_size to 4 or raise the step model's"
    )
    assert "steps form a cycle: step 0 (model 'add_sub'), step 1 (model 'double')" in reasons["ring"]
    assert index["pipeline"]["state"] == "READY"


def test_the_ensemble_has_metadata_and_config_as_any_model(
    http_client: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    metadata = http_client.get_model_metadata("pipeline")
    assert metadata["platform"] == "ensemble"
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert [o["name"] for o in metadata["outputs"]] == ["SUM", "DIFF"]
    assert grpc_client.get_model_metadata("pipeline").platform == "ensemble"
    config = http_client.get_model_config("pipeline")
    steps = config["ensemble_scheduling"]["step"]
    assert [step["model_name"] for step in steps] == list(STEP_MODELS)
    assert "instance_group" not in config or config["instance_group"] == []


def test_deep_health_probes_the_step_models_and_not_the_ensembles(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    before = {name: successes(http_client, name) for name in STEP_MODELS}
    answer = server.request("GET", "/v2/health/deep").json()
    checks = {check["name"] for check in answer["checks"]}
    # 'target_shape' fails its zeros probe (a reshape to [0, 0]); 'orphan' has no step to answer one.
    assert answer["failed"] == ["model:target_shape/1"]
    assert "model:double/1" in checks
    assert not {"model:pipeline/1", "model:orphan/1"} & checks
    assert {name: successes(http_client, name) for name in STEP_MODELS} == before, "probes are no requests"


# Python-backend steps: a test mixing a Python step (conch/backends/python/) with the ONNX steps above
# goes here, using tests.fixtures.ensembles.ensemble_config for its ensemble.


def test_an_ensemble_request_in_flight_finishes_its_steps_while_the_server_drains(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(
        tmp_path / "models",
        {"count": (counting_loop_model(), None), "scale": (scale_step(2.0, width=1), None)},
    )
    write_ensemble(
        root,
        "slow_chain",
        ensemble_config(
            "slow_chain",
            [("ITERATIONS", "TYPE_INT64", [1])],
            [("Y", "TYPE_FP32", [1])],
            [
                ("count", {"ITERATIONS": "ITERATIONS"}, {"COUNTED": "C"}),
                ("scale", {"INPUT0": "C"}, {"OUTPUT0": "Y"}),
            ],
            max_batch_size=4,
        ),
    )
    server = start_server(root, "--exit-timeout-secs", "30")
    results: list[Any] = []

    def slow_request() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        request = httpclient.InferInput("ITERATIONS", [1, 1], "INT64")
        request.set_data_from_numpy(np.array([[400_000]], np.int64))
        try:
            results.append(client.infer("slow_chain", [request]).as_numpy("Y")[0, 0])
        except Exception as exc:
            results.append(exc)

    thread = threading.Thread(target=slow_request)
    thread.start()
    time.sleep(0.15)  # inside the first step, which counts for about 0.4 s
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    thread.join(60)
    assert results == [800_000.0], "the second step ran although the server was draining"
    assert server.process.wait(60) == 0
