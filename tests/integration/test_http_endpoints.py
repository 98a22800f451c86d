"""The V2 REST endpoints other than infer: health, metadata, config, repository index and statistics.

One server serves a small repository: a model with a hand-written config, models left to auto-complete,
and three copies of a three-version model under each of Triton's version policies. Every model route
is exercised with and without ``/versions/<v>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

import conch
from tests.fixtures.onnx_models import (
    ADD_SUB_CONFIG,
    IR_VERSION,
    OPSET,
    add_sub_model,
    fixed_shape_model,
    multi_dtype_model,
    write_repository,
)
from tests.integration.server_process import ServerProcess

# Each versioned model has folders 1, 2 and 3; the policy decides which of them are served.
VERSION_POLICIES = {
    "all-versions": ("all { }", ["1", "2", "3"]),
    "latest-two": ("latest { num_versions: 2 }", ["2", "3"]),
    "specific-versions": ("specific { versions: [ 1, 3 ] }", ["1", "3"]),
}

# "" lets the server choose the version; "1" names it, i.e. the /versions/1/ form of each route.
WITH_AND_WITHOUT_VERSION = pytest.mark.parametrize("version", ["", "1"], ids=["no-version", "version-1"])


def offset_model(offset: int) -> onnx.ModelProto:
    """Y = X + offset, FP32 [batch, 2]: version N of a versioned model adds N, so answers show the version."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "offset"], ["Y"])],
        f"offset_{offset}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[numpy_helper.from_array(np.array(offset, dtype=np.float32), name="offset")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_repository(
        tmp_path_factory.mktemp("endpoints") / "models",
        {
            "add-sub": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "add-sub")),
            "multi-dtype": (multi_dtype_model(), None),
            "fixed-shape": (fixed_shape_model(), None),
            "counted": (add_sub_model(), None),
        },
    )
    for name, (policy, _) in VERSION_POLICIES.items():
        (root / name).mkdir()
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\nversion_policy: {{ {policy} }}\n')
        for version in (1, 2, 3):
            (root / name / str(version)).mkdir()
            (root / name / str(version) / "model.onnx").write_bytes(offset_model(version).SerializeToString())
    return root


def infer_add_sub(client: httpclient.InferenceServerClient, model: str, batch: int) -> httpclient.InferResult:
    inputs = [httpclient.InferInput(f"INPUT{i}", [batch, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((batch, 16), dtype=np.float32))
    return client.infer(model, inputs)


def infer_offset(client: httpclient.InferenceServerClient, model: str, version: str = "") -> np.ndarray:
    x = httpclient.InferInput("X", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[10.0, 20.0]], dtype=np.float32))
    result = client.infer(model, [x], model_version=version)
    answer: np.ndarray = result.as_numpy("Y")
    return answer


def test_server_is_live_and_ready(
    http_client: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    assert http_client.is_server_live()
    assert http_client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert server.request("GET", path).status == 200


def test_server_metadata_names_conch_and_its_extensions(
    http_client: httpclient.InferenceServerClient,
) -> None:
    metadata = http_client.get_server_metadata()
    assert metadata["name"] == "conch"
    assert metadata["version"] == conch.__version__
    for extension in (
        "binary_tensor_data",
        "model_configuration",
        "statistics",
        "model_repository",
        "sequence",
        "schedule_policy",
        "parameters",
    ):
        assert extension in metadata["extensions"]


@WITH_AND_WITHOUT_VERSION
def test_model_metadata_shows_the_batch_dimension_as_minus_one(
    http_client: httpclient.InferenceServerClient, version: str
) -> None:
    metadata = http_client.get_model_metadata("add-sub", version)
    assert metadata == {
        "name": "add-sub",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
    }


def test_model_metadata_of_a_non_batching_model_has_no_batch_dimension(
    http_client: httpclient.InferenceServerClient,
) -> None:
    metadata = http_client.get_model_metadata("fixed-shape")
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [2, 3]}]
    assert metadata["outputs"] == [{"name": "Y", "datatype": "FP32", "shape": [2, 3]}]


def test_model_metadata_shows_a_batch_only_output_as_batch_by_one(
    http_client: httpclient.InferenceServerClient,
) -> None:
    outputs = {o["name"]: o for o in http_client.get_model_metadata("multi-dtype")["outputs"]}
    assert outputs["B_SUM"] == {"name": "B_SUM", "datatype": "FP64", "shape": [-1, 1]}
    assert outputs["A_PLUS_ONE"] == {"name": "A_PLUS_ONE", "datatype": "INT32", "shape": [-1, 3]}


@WITH_AND_WITHOUT_VERSION
def test_model_ready(
    http_client: httpclient.InferenceServerClient, server: ServerProcess, version: str
) -> None:
    assert http_client.is_model_ready("add-sub", version)
    path = f"/v2/models/add-sub/versions/{version}/ready" if version else "/v2/models/add-sub/ready"
    assert server.request("GET", path).status == 200


def test_unknown_model_or_version_is_404_with_an_error_body(server: ServerProcess) -> None:
    for path in (
        "/v2/models/no-such-model",
        "/v2/models/no-such-model/ready",
        "/v2/models/no-such-model/config",
        "/v2/models/add-sub/versions/7",
        "/v2/models/add-sub/versions/7/ready",
        "/v2/models/add-sub/versions/7/config",
    ):
        reply = server.request("GET", path)
        assert reply.status == 404, path
        assert reply.headers["content-type"] == "application/json"
        assert set(reply.json()) == {"error"}
    assert "no-such-model" in server.request("GET", "/v2/models/no-such-model").json()["error"]


@WITH_AND_WITHOUT_VERSION
def test_model_config_is_the_written_config_with_defaults(
    http_client: httpclient.InferenceServerClient, version: str
) -> None:
    config = http_client.get_model_config("add-sub", version)
    assert config["name"] == "add-sub"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [16]),
        ("INPUT1", "TYPE_FP32", [16]),
    ]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["instance_group"][0]["count"] == 1
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


def test_model_config_json_writes_64_bit_integers_as_numbers(server: ServerProcess) -> None:
    # protobuf's JSON mapping writes int64 as strings ("16"); Triton's model config JSON uses numbers.
    reply = server.request("GET", "/v2/models/add-sub/config")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert b'"dims":[16]' in reply.body.replace(b" ", b"")
    specific = server.request("GET", "/v2/models/specific-versions/config").json()
    assert specific["version_policy"] == {"specific": {"versions": [1, 3]}}


def test_model_config_of_a_model_without_config_pbtxt_is_auto_completed(
    http_client: httpclient.InferenceServerClient,
) -> None:
    config = http_client.get_model_config("multi-dtype")
    assert config["name"] == "multi-dtype"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 4  # Triton's default for a graph that can batch
    assert config["default_model_filename"] == "model.onnx"
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("A", "TYPE_INT32", [3]),
        ("B", "TYPE_FP64", [2]),
    ]
    outputs = {o["name"]: o for o in config["output"]}
    assert outputs["B_SUM"]["dims"] == [1]
    assert outputs["B_SUM"]["reshape"] == {"shape": []}
    assert outputs["B_DOUBLE"]["dims"] == [2]
    assert "reshape" not in outputs["B_DOUBLE"]
    assert http_client.get_model_config("fixed-shape")["max_batch_size"] == 0


def test_model_config_of_the_example_without_config_pbtxt(example_server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(example_server.http_url) as client:
        config = client.get_model_config("iris-autoconfig")
    assert config["name"] == "iris-autoconfig"
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("input", "TYPE_FP32", [4])]
    outputs = {o["name"]: o for o in config["output"]}
    assert (outputs["label"]["data_type"], outputs["label"]["dims"]) == ("TYPE_INT64", [1])
    assert outputs["label"]["reshape"] == {"shape": []}
    assert (outputs["probabilities"]["data_type"], outputs["probabilities"]["dims"]) == ("TYPE_FP32", [3])


def test_the_examples_python_model_answers_over_http_and_grpc(example_server: ServerProcess) -> None:
    # text-length is the bundled repository's Python-backend model: BYTES in, code points and words out.
    texts = np.array([["naïve café"], ["hello conch"], [""]], dtype=object)
    answers = []
    for module, url in ((httpclient, example_server.http_url), (grpcclient, example_server.grpc_url)):
        with module.InferenceServerClient(url) as client:
            request = module.InferInput("text", list(texts.shape), "BYTES")
            request.set_data_from_numpy(texts)
            result = client.infer("text-length", [request])
            answers.append((result.as_numpy("characters").tolist(), result.as_numpy("words").tolist()))
    assert answers == [([[10], [11], [0]], [[2], [2], [0]])] * 2

    with httpclient.InferenceServerClient(example_server.http_url) as client:
        assert client.get_model_metadata("text-length")["platform"] == "python"
        request = httpclient.InferInput("text", [1, 1], "BYTES")
        request.set_data_from_numpy(np.array([[b"caf\xe9"]], dtype=object))  # Latin-1, not UTF-8
        with pytest.raises(InferenceServerException) as refused:
            client.infer("text-length", [request])
    assert refused.value.status() == "400"
    assert "input 'text' row 0 is not UTF-8 text: byte 0xe9 at position 3" in refused.value.message()


def served_versions() -> set[tuple[str, str]]:
    """(model, version) of every version the repository fixture serves."""
    single = {("add-sub", "1"), ("multi-dtype", "1"), ("fixed-shape", "1"), ("counted", "1")}
    return single | {(name, v) for name, (_, versions) in VERSION_POLICIES.items() for v in versions}


def test_repository_index_lists_every_served_version_as_ready(
    http_client: httpclient.InferenceServerClient,
) -> None:
    index = http_client.get_model_repository_index()
    assert {(entry["name"], entry["version"]) for entry in index} == served_versions()
    assert {entry["state"] for entry in index} == {"READY"}
    assert {entry["reason"] for entry in index} == {""}
    assert [entry["name"] for entry in index] == sorted(entry["name"] for entry in index)


@pytest.fixture(scope="module")
def partly_ready_server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    """One READY model, one whose version 1 is not ONNX, one whose config does not parse."""
    root = write_repository(
        tmp_path_factory.mktemp("partly-ready") / "models",
        {
            "good": (add_sub_model(), None),
            "not-onnx": (add_sub_model(), None),
            "bad-config": (add_sub_model(), 'name: "bad-config"\nmax_batch_size: [ not a number\n'),
        },
    )
    (root / "not-onnx" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    return start_server(root)


def test_repository_index_with_ready_filter(partly_ready_server: ServerProcess) -> None:
    def index(body: bytes) -> list[tuple[str, str, str]]:
        reply = partly_ready_server.request(
            "POST", "/v2/repository/index", body, {"Content-Type": "application/json"}
        )
        assert reply.status == 200, body
        return [(entry["name"], entry["version"], entry["state"]) for entry in reply.json()]

    everything = [("bad-config", "", "UNAVAILABLE"), ("good", "1", "READY"), ("not-onnx", "1", "UNAVAILABLE")]
    for body in (b"", b"{}", b'{"ready": false}'):
        assert index(body) == everything, body
    assert index(b'{"ready": true}') == [("good", "1", "READY")]


@pytest.mark.parametrize("body", [b'{"ready": "yes"}', b'{"ready": 1}', b"[true]", b"{"])
def test_repository_index_refuses_a_body_it_cannot_read(server: ServerProcess, body: bytes) -> None:
    reply = server.request("POST", "/v2/repository/index", body, {"Content-Type": "application/json"})

    assert reply.status == 400
    assert reply.json()["error"]


@pytest.mark.parametrize("name", list(VERSION_POLICIES))
def test_version_policy_decides_the_served_versions(
    http_client: httpclient.InferenceServerClient, server: ServerProcess, name: str
) -> None:
    served = VERSION_POLICIES[name][1]
    assert http_client.get_model_metadata(name)["versions"] == served
    for version in ("1", "2", "3"):
        assert http_client.is_model_ready(name, version) == (version in served)
        if version in served:
            assert http_client.get_model_metadata(name, version)["versions"] == [version]
            np.testing.assert_array_equal(
                infer_offset(http_client, name, version), [[10 + int(version), 20 + int(version)]]
            )
        else:
            assert server.request("GET", f"/v2/models/{name}/versions/{version}/ready").status == 404
            with pytest.raises(InferenceServerException) as not_served:
                infer_offset(http_client, name, version)
            assert not_served.value.status() == "404"
    latest = served[-1]
    np.testing.assert_array_equal(infer_offset(http_client, name), [[10 + int(latest), 20 + int(latest)]])


def test_version_policies_as_config_json(http_client: httpclient.InferenceServerClient) -> None:
    assert http_client.get_model_config("all-versions")["version_policy"] == {"all": {}}
    assert http_client.get_model_config("latest-two")["version_policy"] == {"latest": {"num_versions": 2}}
    assert http_client.get_model_config("specific-versions")["version_policy"] == {
        "specific": {"versions": [1, 3]}
    }


def model_stats(
    client: httpclient.InferenceServerClient, name: str, version: str = ""
) -> list[dict[str, Any]]:
    stats: list[dict[str, Any]] = client.get_inference_statistics(name, version)["model_stats"]
    return stats


def test_statistics_count_requests_executions_and_batch_sizes(
    http_client: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    (before,) = model_stats(http_client, "counted")
    assert (before["inference_count"], before["execution_count"], before["last_inference"]) == (0, 0, 0)
    assert before["batch_stats"] == []

    for batch in (1, 2, 2):
        infer_add_sub(http_client, "counted", batch)
    (stats,) = model_stats(http_client, "counted")
    assert (stats["name"], stats["version"]) == ("counted", "1")
    assert stats["inference_count"] == 5  # rows: 1 + 2 + 2
    assert stats["execution_count"] == 3
    assert abs(stats["last_inference"] - time.time() * 1000) < 60_000
    inference = stats["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[key]["count"] == 3, key
    for key in ("success", "compute_infer"):
        assert inference[key]["ns"] > 0, key
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"]
    assert inference["fail"] == {"count": 0, "ns": 0}
    by_size = {entry["batch_size"]: entry for entry in stats["batch_stats"]}
    assert sorted(by_size) == [1, 2]
    assert by_size[1]["compute_infer"]["count"] == 1
    assert by_size[2]["compute_infer"]["count"] == 2
    assert by_size[2]["compute_infer"]["ns"] > 0

    with pytest.raises(InferenceServerException) as failed:
        bad = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.float32))
        http_client.infer("counted", [bad])
    assert failed.value.status() == "400"
    (after,) = model_stats(http_client, "counted")
    assert after["inference_stats"]["fail"]["count"] == 1
    assert after["inference_stats"]["success"]["count"] == 3
    assert after["inference_count"] == 5

    assert model_stats(http_client, "counted", "1") == [after]
    raw = server.request("GET", "/v2/models/counted/versions/1/stats").json()
    assert raw == {"model_stats": [after]}


def test_statistics_of_all_models_list_every_served_version(
    http_client: httpclient.InferenceServerClient,
) -> None:
    stats = http_client.get_inference_statistics()["model_stats"]
    assert {(s["name"], s["version"]) for s in stats} == served_versions()


def test_statistics_are_kept_per_version(http_client: httpclient.InferenceServerClient) -> None:
    def counts() -> dict[str, int]:
        return {s["version"]: s["inference_count"] for s in model_stats(http_client, "all-versions")}

    before = counts()
    infer_offset(http_client, "all-versions", "2")
    infer_offset(http_client, "all-versions", "2")
    infer_offset(http_client, "all-versions")  # the newest: 3
    after = counts()
    assert {v: after[v] - before[v] for v in after} == {"1": 0, "2": 2, "3": 1}
    (two,) = model_stats(http_client, "all-versions", "2")
    assert (two["version"], two["inference_count"]) == ("2", after["2"])


@pytest.mark.parametrize("version", ["", "/versions/1"], ids=["no-version", "version-1"])
def test_every_model_route_answers_with_and_without_a_version(server: ServerProcess, version: str) -> None:
    base = f"/v2/models/add-sub{version}"
    for path in (base, f"{base}/ready", f"{base}/config", f"{base}/stats"):
        reply = server.request("GET", path)
        assert reply.status == 200, path
        if not path.endswith("/ready"):
            assert isinstance(json.loads(reply.body), dict)
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
        ]
    }
    reply = server.request("POST", f"{base}/infer", json.dumps(body).encode())
    assert reply.status == 200
    assert reply.json()["model_version"] == "1"
