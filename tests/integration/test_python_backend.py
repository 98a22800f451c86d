"""Triton Python-backend models served by a real ``conch serve``, called with tritonclient HTTP and gRPC.

Covers the API a ``model.py`` uses (initialize's args, request and response objects, auto-complete,
async execute), every datatype including BYTES and FP16, batching through the dynamic batcher,
per-request errors and their status codes, failures at load, and the statistics and metrics.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.backends.python.stub import conch_ipc
from tests.fixtures import python_models as models
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

NUMPY = conch_ipc.NUMPY_OF


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-models")
    models.write_python_model(root, "every_datatype", models.every_datatype_config(), models.EVERY_DATATYPE)
    models.write_python_model(
        root,
        "add_sub",
        models.ADD_SUB_CONFIG.format(name="add_sub", delay_us=200_000, instances=1),
        models.ADD_SUB,
    )
    models.write_python_model(root, "errors", models.ERRORS_CONFIG, models.ERRORS)
    models.write_python_model(root, "auto", 'name: "auto"\nbackend: "python"\n', models.AUTO_COMPLETE)
    models.write_python_model(root, "args", models.ARGS_CONFIG, models.ARGS)
    models.write_python_model(root, "metrics", models.METRICS_CONFIG, models.METRICS)
    sender = models.ONE_IN_ONE_OUT.format(
        name="sender", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
    )
    models.write_python_model(root, "sender", sender, models.SENDER)
    for name, refuse in (("warmed", False), ("warm_fails", True)):
        models.write_python_model(
            root, name, models.WARMED_CONFIG.format(name=name), models.WARMED.format(refuse=refuse)
        )
    (root / "no_config" / "1").mkdir(parents=True)  # model.py alone: auto-complete makes it a Python model
    (root / "no_config" / "1" / "model.py").write_text(models.AUTO_COMPLETE)
    models.write_python_model(
        root,
        "broken_init",
        models.ONE_IN_ONE_OUT.format(
            name="broken_init", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
        ),
        models.FAILING_INITIALIZE,
    )
    models.write_python_model(
        root,
        "broken_import",
        models.ONE_IN_ONE_OUT.format(
            name="broken_import", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
        ),
        "import numpy as np\nimport a_package_nobody_has\n",
    )
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, "--strict-readiness", "false")


def _sample(datatype: str, rows: int = 2) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([[b"abc", b"\x00\xffz"]] * rows, dtype=object)
    if datatype == "BOOL":
        return np.array([[True, False, True]] * rows)
    info = np.iinfo(NUMPY[datatype]) if datatype[0] in "UI" else None
    top = 100 if info is None else min(info.max // 2, 100)
    return np.arange(3 * rows).reshape(rows, 3).astype(NUMPY[datatype]) % top


def _expected(datatype: str, value: np.ndarray) -> np.ndarray:
    if datatype == "BOOL":
        return np.logical_not(value)
    if datatype == "BYTES":
        return np.array([v[::-1] for v in value.reshape(-1)], dtype=object).reshape(value.shape)
    return (value * 2).astype(value.dtype)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_datatype_crosses_both_ways(
    protocol: str,
    http_client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    module, client = (httpclient, http_client) if protocol == "http" else (grpcclient, grpc_client)
    inputs = []
    for datatype in models.DATATYPES:
        value = _sample(datatype)
        tensor = module.InferInput(f"IN_{datatype}", list(value.shape), datatype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)

    result = client.infer("every_datatype", inputs)

    for datatype in models.DATATYPES:
        got = result.as_numpy(f"OUT_{datatype}")
        want = _expected(datatype, _sample(datatype))
        assert got.shape == want.shape, datatype
        if datatype == "BYTES":
            assert got.tolist() == want.tolist()
        else:
            assert got.dtype == want.dtype, datatype
            np.testing.assert_array_equal(got, want)


def test_requests_are_batched_into_one_execute(http_client: httpclient.InferenceServerClient) -> None:
    before = http_client.get_inference_statistics("add_sub")["model_stats"][0]
    answers: list[np.ndarray] = []

    def call(seed: int) -> None:
        a = np.full((1, 16), seed, dtype=np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones_like(a))
        with httpclient.InferenceServerClient(http_client._parsed_url.netloc) as own:
            result = own.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
        answers.append(result.as_numpy("REQUESTS"))

    threads = [threading.Thread(target=call, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    after = http_client.get_inference_statistics("add_sub")["model_stats"][0]
    executions = after["execution_count"] - before.get("execution_count", 0)
    requests = after["inference_count"] - before.get("inference_count", 0)
    assert len(answers) == 6 and requests == 6
    assert executions < requests  # the 200 ms window put several requests in one execute
    assert max(int(a[0, 0]) for a in answers) > 1  # execute got a list of more than one request


def _code_call(client: httpclient.InferenceServerClient, code: int) -> int | str:
    tensor = httpclient.InferInput("CODE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[code]], dtype=np.int32))
    try:
        return int(client.infer("errors", [tensor]).as_numpy("ECHO")[0, 0])
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"


def test_a_request_error_fails_only_that_request(server: ServerProcess) -> None:
    codes = [0, 3, 0, 2, 4, 1, 0]
    results: dict[int, int | str] = {}

    def call(index: int) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            results[index] = _code_call(client, codes[index])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(codes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [results[i] for i in (0, 2, 6)] == [0, 0, 0]
    assert results[1] == "400 code 3 asked"  # INVALID_ARG
    assert results[3] == "404 code 2 asked"  # NOT_FOUND
    assert results[4] == "503 code 4 asked"  # UNAVAILABLE
    assert results[5] == "500 code 1 asked"  # INTERNAL


def test_an_exception_in_execute_fails_its_call_only(http_client: httpclient.InferenceServerClient) -> None:
    failed = _code_call(http_client, 99)
    assert isinstance(failed, str) and failed.startswith("500 ")
    assert "failed to execute: ValueError: the model refuses code 99" in failed
    assert _code_call(http_client, 0) == 0  # the instance serves the next call


def test_no_path_reaches_the_client(http_client: httpclient.InferenceServerClient) -> None:
    failed = _code_call(http_client, 98)
    assert isinstance(failed, str) and "FileNotFoundError" in failed
    assert "/nonexistent" not in failed and "secret" not in failed and "Traceback" not in failed


def test_protocol_routes_in_a_message_are_not_taken_for_paths(
    http_client: httpclient.InferenceServerClient,
) -> None:
    failed = _code_call(http_client, 96)
    assert isinstance(failed, str) and "POST /v2/models/other/generate_stream instead" in failed


def test_wrong_number_of_responses_is_a_clear_error(http_client: httpclient.InferenceServerClient) -> None:
    failed = _code_call(http_client, 97)
    assert isinstance(failed, str) and failed.startswith("500 ")
    assert "got 1 request(s) and returned 0 response(s)" in failed


@pytest.mark.parametrize("model", ["auto", "no_config"])
def test_auto_complete_config_fills_the_config(
    model: str, http_client: httpclient.InferenceServerClient
) -> None:
    config = http_client.get_model_config(model)
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("X", "TYPE_FP32", [3])]
    assert [o["name"] for o in config["output"]] == ["Y"]
    assert "dynamic_batching" in config
    tensor = httpclient.InferInput("X", [2, 3], "FP32")
    tensor.set_data_from_numpy(np.zeros((2, 3), dtype=np.float32))
    np.testing.assert_array_equal(http_client.infer(model, [tensor]).as_numpy("Y"), np.ones((2, 3)))


def _ask(client: grpcclient.InferenceServerClient, key: str, **kwargs: object) -> str:
    tensor = grpcclient.InferInput("KEY", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([key.encode()], dtype=object))
    return bytes(client.infer("args", [tensor], **kwargs).as_numpy("VALUE")[0]).decode()  # type: ignore[arg-type]


def test_initialize_gets_tritons_args(
    grpc_client: grpcclient.InferenceServerClient, repository: Path
) -> None:
    assert _ask(grpc_client, "model_name") == "args"
    assert _ask(grpc_client, "model_version") == "1"
    assert _ask(grpc_client, "model_instance_name") == "args_0_0"
    assert _ask(grpc_client, "model_instance_kind") == "CPU"
    assert _ask(grpc_client, "model_instance_device_id") == "0"
    assert Path(_ask(grpc_client, "model_repository")) == repository / "args"
    assert _ask(grpc_client, "greeting") == "hello"  # model_config is the config as JSON


def test_request_id_parameters_and_outputs_reach_the_model(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    assert _ask(grpc_client, "request_id", request_id="abc-1") == "abc-1"
    parameters = json.loads(_ask(grpc_client, "parameters", parameters={"tenant": "blue", "limit": 3}))
    assert parameters == {"tenant": "blue", "limit": 3}
    assert _ask(grpc_client, "outputs") == "VALUE"


def test_models_that_cannot_start_are_unavailable_with_the_reason(server: ServerProcess) -> None:
    index = {entry["name"]: entry for entry in server.request("POST", "/v2/repository/index").json()}
    assert index["broken_init"]["state"] == "UNAVAILABLE"
    assert (
        "initialize failed: RuntimeError: the weights at <path> are missing" in index["broken_init"]["reason"]
    )
    assert "/models/private" not in index["broken_init"]["reason"]
    assert index["broken_import"]["state"] == "UNAVAILABLE"
    assert "ModuleNotFoundError: No module named 'a_package_nobody_has'" in index["broken_import"]["reason"]
    assert server.request("GET", "/v2/models/add_sub/ready").status == 200  # the others serve


def test_statistics_and_metrics_count_python_models(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    _code_call(http_client, 0)
    stats = http_client.get_inference_statistics("errors")["model_stats"][0]
    assert stats["execution_count"] >= 1
    assert int(stats["inference_stats"]["compute_infer"]["ns"]) > 0
    metrics = scrape(server.metrics_url)
    assert metrics.value("nv_inference_request_success", model="errors", version="1") >= 1
    assert metrics.value("nv_inference_exec_count", model="every_datatype", version="1") >= 1
    assert metrics.value("nv_inference_request_failure", model="errors", version="1", reason="BACKEND") >= 1


def test_custom_metrics_reach_the_metrics_page(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    counts = []
    for value in (0.5, 5.0, 50.0):
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        counts.append(float(http_client.infer("metrics", [tensor]).as_numpy("COUNT")[0]))
    assert counts == [1.0, 2.0, 3.0]  # value() in the model
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        page = reply.read().decode()
    labels = '{model="metrics",version="1"}'
    assert "# TYPE test_model_requests counter" in page  # a bare counter name, as Triton writes it
    assert f"test_model_requests{labels} 3.0" in page
    assert f"test_model_last_input{labels} 50.0" in page
    assert 'test_model_inputs_bucket{le="1.0",model="metrics",version="1"} 1.0' in page
    assert 'test_model_inputs_bucket{le="10.0",model="metrics",version="1"} 2.0' in page
    assert f"test_model_inputs_count{labels} 3.0" in page


def test_model_warmup_runs_before_the_first_request(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
    assert int(http_client.infer("warmed", [tensor]).as_numpy("CALLS")[0, 0]) == 4  # 3 warm-up runs first
    index = {e["name"]: e for e in server.request("POST", "/v2/repository/index").json()}
    assert index["warm_fails"]["state"] == "UNAVAILABLE"
    assert "warm-up sample 'zeros' failed" in index["warm_fails"]["reason"]
    assert "ValueError: zeros are not an input this model takes" in index["warm_fails"]["reason"]


def test_a_model_may_answer_through_its_response_sender(
    http_client: httpclient.InferenceServerClient,
) -> None:
    for value in (1.5, 2.0):
        tensor = httpclient.InferInput("IN", [2], "FP32")
        tensor.set_data_from_numpy(np.array([value, 1.0], dtype=np.float32))
        np.testing.assert_array_equal(
            http_client.infer("sender", [tensor]).as_numpy("OUT"), [value * 10, 10.0]
        )
