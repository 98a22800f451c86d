"""The non-inference RPCs of the gRPC service, called through ``tritonclient.grpc`` as a user would.

Health, server and model metadata, model config (as written and as auto-completed), statistics and
the repository index, plus the status code of each failure: NOT_FOUND for an unknown model or
version, UNAVAILABLE for a model that failed to load, INVALID_ARGUMENT for a bad request.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

import conch
from tests.fixtures.onnx_models import (
    add_sub_grpc_inputs,
    add_sub_model,
    fixed_shape_model,
    multi_dtype_model,
    write_repository,
)
from tests.integration.server_process import ServerProcess

# A config that sets a few fields and leaves inputs and outputs to auto-complete; both versions served.
SIMPLE_CONFIG = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { all: {} }
"""


@pytest.fixture(scope="module", params=["in-process", "proxies"])
def server(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> ServerProcess:
    """simple (versions 1 and 2), multi-dtype and fixed-shape (no config.pbtxt), broken (not ONNX); every
    test runs against gRPC served in-process and through two proxy processes (``--proxies 2``)."""
    root = write_repository(
        tmp_path_factory.mktemp("grpc-endpoints"),
        {
            "simple": (add_sub_model(), SIMPLE_CONFIG),
            "multi-dtype": (multi_dtype_model(), None),
            "fixed-shape": (fixed_shape_model(), None),
        },
    )
    shutil.copytree(root / "simple" / "1", root / "simple" / "2")
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"these bytes are not an ONNX model")
    # Without strict readiness the server is ready although "broken" failed to load.
    proxies = "2" if request.param == "proxies" else "0"
    return start_server(root, "--strict-readiness", "false", "--proxies", proxies)


def test_server_is_live_and_ready(grpc_client: grpcclient.InferenceServerClient) -> None:
    assert grpc_client.is_server_live()
    assert grpc_client.is_server_ready()


def test_model_ready_per_model_and_version(grpc_client: grpcclient.InferenceServerClient) -> None:
    assert grpc_client.is_model_ready("simple")
    assert grpc_client.is_model_ready("simple", "1")
    assert grpc_client.is_model_ready("simple", "2")
    assert grpc_client.is_model_ready("multi-dtype")
    assert not grpc_client.is_model_ready("broken")
    assert not grpc_client.is_model_ready("broken", "1")


def test_server_metadata(grpc_client: grpcclient.InferenceServerClient) -> None:
    metadata = grpc_client.get_server_metadata()
    assert metadata.name == "conch"
    assert metadata.version == conch.__version__
    assert {"binary_tensor_data", "model_configuration", "statistics", "model_repository"} <= set(
        metadata.extensions
    )


def test_model_metadata_shows_the_batch_dimension_as_minus_one(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    metadata = grpc_client.get_model_metadata("simple")
    assert metadata.name == "simple"
    assert list(metadata.versions) == ["1", "2"]
    assert metadata.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [-1, 16]),
        ("INPUT1", "FP32", [-1, 16]),
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("OUTPUT0", "FP32", [-1, 16]),
        ("OUTPUT1", "FP32", [-1, 16]),
    ]


def test_model_metadata_of_one_version(grpc_client: grpcclient.InferenceServerClient) -> None:
    assert list(grpc_client.get_model_metadata("simple", "1").versions) == ["1"]


def test_model_metadata_of_a_batch_only_output_and_of_a_non_batching_model(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    multi = grpc_client.get_model_metadata("multi-dtype")
    assert {t.name: list(t.shape) for t in multi.outputs} == {
        "A_PLUS_ONE": [-1, 3],
        "B_SUM": [-1, 1],
        "B_DOUBLE": [-1, 2],
    }
    assert {t.name: t.datatype for t in multi.inputs} == {"A": "INT32", "B": "FP64"}
    fixed = grpc_client.get_model_metadata("fixed-shape")
    assert [list(t.shape) for t in fixed.inputs] == [[2, 3]]


def test_model_config_is_auto_completed_from_the_graph(grpc_client: grpcclient.InferenceServerClient) -> None:
    config = grpc_client.get_model_config("multi-dtype").config
    assert config.name == "multi-dtype"
    assert config.platform == "onnxruntime_onnx"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 4
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("A", mc.TYPE_INT32, [3]),
        ("B", mc.TYPE_FP64, [2]),
    ]
    b_sum = next(o for o in config.output if o.name == "B_SUM")
    assert list(b_sum.dims) == [1]
    assert b_sum.HasField("reshape")
    assert list(b_sum.reshape.shape) == []
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert config.instance_group[0].count == 1


def test_model_config_as_json(grpc_client: grpcclient.InferenceServerClient) -> None:
    config = grpc_client.get_model_config("multi-dtype", as_json=True)["config"]
    assert config["name"] == "multi-dtype"
    assert config["max_batch_size"] == 4
    # tritonclient renders int64 fields such as dims as strings (protobuf's MessageToJson).
    assert {o["name"]: [int(d) for d in o["dims"]] for o in config["output"]} == {
        "A_PLUS_ONE": [3],
        "B_SUM": [1],
        "B_DOUBLE": [2],
    }
    assert config["default_model_filename"] == "model.onnx"


def test_model_config_keeps_what_config_pbtxt_sets(grpc_client: grpcclient.InferenceServerClient) -> None:
    config = grpc_client.get_model_config("simple", "1").config
    assert config.max_batch_size == 8
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]


def test_model_config_of_a_non_batching_model(grpc_client: grpcclient.InferenceServerClient) -> None:
    config = grpc_client.get_model_config("fixed-shape").config
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [2, 3]


def _stats(client: grpcclient.InferenceServerClient, version: str) -> Any:
    (entry,) = client.get_inference_statistics("simple", version).model_stats
    assert (entry.name, entry.version) == ("simple", version)
    return entry


def test_model_statistics_count_inferences_per_version(grpc_client: grpcclient.InferenceServerClient) -> None:
    before = {v: _stats(grpc_client, v) for v in ("1", "2")}
    for _ in range(3):
        grpc_client.infer("simple", add_sub_grpc_inputs(2), model_version="1")
    grpc_client.infer("simple", add_sub_grpc_inputs(5), model_version="2")
    with pytest.raises(InferenceServerException):
        grpc_client.infer("simple", add_sub_grpc_inputs(9), model_version="2")  # above max_batch_size 8
    one, two = _stats(grpc_client, "1"), _stats(grpc_client, "2")

    assert one.inference_count - before["1"].inference_count == 6  # 3 requests of batch 2
    assert one.execution_count - before["1"].execution_count == 3
    assert one.inference_stats.success.count - before["1"].inference_stats.success.count == 3
    assert one.inference_stats.fail.count == before["1"].inference_stats.fail.count
    assert one.inference_stats.compute_infer.ns > 0
    assert one.last_inference > 0
    assert 2 in {b.batch_size for b in one.batch_stats}

    assert two.inference_count - before["2"].inference_count == 5
    assert two.inference_stats.success.count - before["2"].inference_stats.success.count == 1
    assert two.inference_stats.fail.count - before["2"].inference_stats.fail.count == 1


def test_model_statistics_of_every_version_and_every_model(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    simple = grpc_client.get_inference_statistics("simple").model_stats
    assert [(s.name, s.version) for s in simple] == [("simple", "1"), ("simple", "2")]
    everything = grpc_client.get_inference_statistics().model_stats
    # Only loaded versions have statistics: "broken" is not among them.
    assert sorted((s.name, s.version) for s in everything) == [
        ("fixed-shape", "1"),
        ("multi-dtype", "1"),
        ("simple", "1"),
        ("simple", "2"),
    ]


def test_repository_index_lists_every_version_with_its_state(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    index = grpc_client.get_model_repository_index().models
    states = {(m.name, m.version): m.state for m in index}
    assert states == {
        ("broken", "1"): "UNAVAILABLE",
        ("fixed-shape", "1"): "READY",
        ("multi-dtype", "1"): "READY",
        ("simple", "1"): "READY",
        ("simple", "2"): "READY",
    }
    broken = next(m for m in index if m.name == "broken")
    assert "not a loadable ONNX model" in broken.reason


def test_repository_index_of_ready_models_only(server: ServerProcess) -> None:
    # tritonclient.grpc has no 'ready' argument for the index, so this calls the service stub directly.
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        index = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
    assert sorted(m.name for m in index.models) == ["fixed-shape", "multi-dtype", "simple", "simple"]
    assert {m.state for m in index.models} == {"READY"}


ClientCall = Callable[[grpcclient.InferenceServerClient], object]

ERRORS: list[tuple[str, ClientCall, str, str]] = [
    ("ready-unknown-model", lambda c: c.is_model_ready("nope"), "NOT_FOUND", "nope"),
    ("metadata-unknown-model", lambda c: c.get_model_metadata("nope"), "NOT_FOUND", "nope"),
    ("config-unknown-model", lambda c: c.get_model_config("nope"), "NOT_FOUND", "nope"),
    ("stats-unknown-model", lambda c: c.get_inference_statistics("nope"), "NOT_FOUND", "nope"),
    ("infer-unknown-model", lambda c: c.infer("nope", add_sub_grpc_inputs(1)), "NOT_FOUND", "nope"),
    ("ready-unknown-version", lambda c: c.is_model_ready("simple", "7"), "NOT_FOUND", "version 7"),
    ("metadata-unknown-version", lambda c: c.get_model_metadata("simple", "7"), "NOT_FOUND", "version 7"),
    ("config-unknown-version", lambda c: c.get_model_config("simple", "7"), "NOT_FOUND", "version 7"),
    ("stats-unknown-version", lambda c: c.get_inference_statistics("simple", "7"), "NOT_FOUND", "version 7"),
    (
        "infer-unknown-version",
        lambda c: c.infer("simple", add_sub_grpc_inputs(1), model_version="7"),
        "NOT_FOUND",
        "version 7",
    ),
    ("metadata-failed-model", lambda c: c.get_model_metadata("broken"), "UNAVAILABLE", "broken"),
    ("config-failed-model", lambda c: c.get_model_config("broken"), "UNAVAILABLE", "broken"),
    ("infer-failed-model", lambda c: c.infer("broken", add_sub_grpc_inputs(1)), "UNAVAILABLE", "broken"),
    (
        "infer-batch-too-large",
        lambda c: c.infer("simple", add_sub_grpc_inputs(9)),
        "INVALID_ARGUMENT",
        "max_batch_size",
    ),
    (
        "infer-wrong-model-inputs",
        lambda c: c.infer("multi-dtype", add_sub_grpc_inputs(1)),
        "INVALID_ARGUMENT",
        "INPUT0",
    ),
]


@pytest.mark.parametrize(("call", "status", "needle"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_carry_their_grpc_status_code(
    grpc_client: grpcclient.InferenceServerClient, call: ClientCall, status: str, needle: str
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        call(grpc_client)
    assert caught.value.status() == f"StatusCode.{status}"
    assert needle in (caught.value.message() or "")


def test_server_still_serves_after_errors(grpc_client: grpcclient.InferenceServerClient) -> None:
    result = grpc_client.infer("simple", add_sub_grpc_inputs(1))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, dtype=np.float32))
    assert result.get_response().model_version == "2"  # the newest version by default


#: The CUDA shared-memory method conch refuses with a clear INVALID_ARGUMENT (nothing can be shared).
CUDA_SHARED_MEMORY = {"CudaSharedMemoryRegister"}
SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
UNARY = sorted(m.name for m in SERVICE.methods if not m.client_streaming and not m.server_streaming)


def call_empty(server: ServerProcess, method: str) -> Any:
    """``method``'s answer to an empty request; its error is raised as the ``grpc.RpcError`` it is."""
    descriptor = SERVICE.methods_by_name[method]
    request_type = getattr(service_pb2, descriptor.input_type.name)
    response_type = getattr(service_pb2, descriptor.output_type.name)
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        return call(request_type(), timeout=30)


def call_method(server: ServerProcess, method: str) -> grpc.RpcError:
    """The error of ``method`` called with an empty request."""
    with pytest.raises(grpc.RpcError) as caught:
        call_empty(server, method)
    return caught.value


@pytest.mark.parametrize("method", UNARY)
def test_every_method_of_the_service_is_served(server: ServerProcess, method: str) -> None:
    """An empty request is answered, or refused for what it lacks, never left UNIMPLEMENTED."""
    try:
        call_empty(server, method)
    except grpc.RpcError as refused:
        assert refused.code() != grpc.StatusCode.UNIMPLEMENTED, refused.details()


def test_a_method_outside_the_service_answers_unimplemented(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(f"/{SERVICE.full_name}/ModelExplain")
        with pytest.raises(grpc.RpcError) as caught:
            call(b"", timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("method", "setting"), [("TraceSetting", "trace_level"), ("LogSettings", "log_info")]
)
def test_an_empty_settings_request_answers_the_settings(
    server: ServerProcess, method: str, setting: str
) -> None:
    assert setting in call_empty(server, method).settings


@pytest.mark.parametrize("method", sorted(CUDA_SHARED_MEMORY))
def test_cuda_shared_memory_is_refused_with_a_reason(server: ServerProcess, method: str) -> None:
    error = call_method(server, method)

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("CUDA shared memory is not supported by this server")


@pytest.mark.parametrize("method", ["load_model", "unload_model"])
def test_load_and_unload_answer_unavailable_without_explicit_mode(
    grpc_client: grpcclient.InferenceServerClient, method: str
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        getattr(grpc_client, method)("simple")

    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    assert "--model-control-mode explicit" in (caught.value.message() or "")
    assert grpc_client.is_model_ready("simple"), "the model still serves"
