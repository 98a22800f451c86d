"""Circuit breakers and the three-level fallback, end to end on a real server with real clients.

The failing model is a Reshape to a shape the request chooses: ``SHAPE`` [3, 3] cannot hold 4 values,
so ONNX Runtime fails while running (a 500), while [2, 2] answers. Its stand-in ignores ``SHAPE``
and always answers [2, 2], so an answer says which version computed it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, reshape_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

BREAKER = """
parameters { key: "circuit_breaker.minimum_calls" value { string_value: "4" } }
parameters { key: "circuit_breaker.window_calls" value { string_value: "4" } }
parameters { key: "circuit_breaker.open_seconds" value { string_value: "1" } }
parameters { key: "circuit_breaker.half_open_calls" value { string_value: "2" } }
"""
GOOD, BAD = [2, 2], [3, 3]


def fixed_reshape_model() -> Any:
    """The same interface as ``reshape_model``, always answering [2, 2]: it ignores SHAPE."""
    model = reshape_model()
    model.graph.initializer.append(helper.make_tensor("two_by_two", TensorProto.INT64, [2], [2, 2]))
    model.graph.node[0].input[1] = "two_by_two"
    return model


def call(server: ServerProcess, model: str, shape: list[int], protocol: str = "http") -> Any:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    inputs = [module.InferInput("X", [4], "FP32"), module.InferInput("SHAPE", [2], "INT64")]
    inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.array(shape, dtype=np.int64))
    return client.infer(model, inputs)


def status_of(server: ServerProcess, model: str, shape: list[int]) -> int:
    body = (
        '{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[0,1,2,3]},'
        f'{{"name":"SHAPE","shape":[2],"datatype":"INT64","data":{shape}}}]}}'
    ).encode()
    return server.request("POST", f"/v2/models/{model}/infer", body).status


def circuit_state(server: ServerProcess, model: str) -> float:
    return scrape(server.metrics_url).value("conch_circuit_state", model=model)


def fallbacks(server: ServerProcess) -> dict[tuple[str, str, str, str], float]:
    return {
        (s.labels["model"], s.labels["version"], s.labels["level"], s.labels["reason"]): s.value
        for s in scrape(server.metrics_url).samples("conch_fallback_total")
    }


def test_the_breaker_opens_fails_fast_half_opens_and_closes(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(tmp_path / "models", {"flaky": (reshape_model(), 'name: "flaky"\n' + BREAKER)})
    server = start_server(root)

    assert [status_of(server, "flaky", BAD) for _ in range(4)] == [500] * 4
    refused = server.request(
        "POST",
        "/v2/models/flaky/infer",
        b'{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[0,1,2,3]},'
        b'{"name":"SHAPE","shape":[2],"datatype":"INT64","data":[2,2]}]}',
    )
    assert refused.status == 503, refused.body
    assert "circuit breaker is open" in refused.json()["error"]
    assert circuit_state(server, "flaky") == 1.0
    time.sleep(1.2)
    assert [status_of(server, "flaky", GOOD) for _ in range(2)] == [200, 200]  # the two probes
    assert circuit_state(server, "flaky") == 0.0
    assert status_of(server, "flaky", GOOD) == 200
    assert "circuit_breaker_transition model=flaky version=1 from_state=closed to=open" in server.log()
    assert "from_state=half_open to=closed" in server.log()


def test_client_errors_never_open_the_breaker(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(tmp_path / "models", {"flaky": (reshape_model(), 'name: "flaky"\n' + BREAKER)})
    server = start_server(root)
    wrong_type = b'{"inputs":[{"name":"X","shape":[4],"datatype":"INT32","data":[0,1,2,3]}]}'

    statuses = [server.request("POST", "/v2/models/flaky/infer", wrong_type).status for _ in range(12)]

    assert statuses == [400] * 12
    assert status_of(server, "flaky", GOOD) == 200
    assert circuit_state(server, "flaky") == 0.0


def test_model_fallback_stands_in_for_a_version_that_fails_to_load(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    config = 'name: "scored"\nparameters { key: "FALLBACK_STRATEGY" value { string_value: "MODEL" } }\n'
    root = write_repository(tmp_path / "models", {"scored": (fixed_reshape_model(), config)})
    (root / "scored" / "2").mkdir()
    (root / "scored" / "2" / "model.onnx").write_bytes(b"not an onnx model")
    plain = write_repository(tmp_path / "plain", {"scored": (fixed_reshape_model(), 'name: "scored"\n')})
    (plain / "scored" / "2").mkdir()
    (plain / "scored" / "2" / "model.onnx").write_bytes(b"not an onnx model")
    server, without = start_server(root), start_server(plain)

    http = call(server, "scored", GOOD)
    grpc = call(server, "scored", GOOD, "grpc")
    reply = server.request(
        "POST",
        "/v2/models/scored/infer",
        b'{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[0,1,2,3]},'
        b'{"name":"SHAPE","shape":[2],"datatype":"INT64","data":[2,2]}]}',
    )

    assert http.get_response()["model_version"] == "1"
    assert http.get_response()["parameters"] == {"fallback_level": "MODEL", "fallback_reason": "load_failed"}
    assert grpc.get_response().parameters["fallback_level"].string_param == "MODEL"
    assert reply.headers["conch-fallback"] == "MODEL"
    assert server.request("GET", "/v2/health/ready").status == 200
    assert fallbacks(server)[("scored", "1", "MODEL", "load_failed")] == 3
    assert without.request("GET", "/v2/models/scored/ready").status == 503  # no strategy: nothing serves


def test_model_fallback_answers_from_the_last_good_version_while_the_circuit_is_open(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    config = (
        'name: "scored"\nversion_policy: { latest: { num_versions: 1 } }\n'
        'parameters { key: "FALLBACK_STRATEGY" value { string_value: "MODEL->BUSINESS" } }\n'
        'parameters { key: "FALLBACK_BUSINESS_DEFAULT" '
        'value { string_value: "{\\"Y\\": [[0, 0], [0, 0]]}" } }\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]\n' + BREAKER
    )
    root = write_repository(tmp_path / "models", {"scored": (fixed_reshape_model(), config)})
    (root / "scored" / "2").mkdir()
    (root / "scored" / "2" / "model.onnx").write_bytes(reshape_model().SerializeToString())
    server = start_server(root)
    index = {e["version"]: e for e in server.request("POST", "/v2/repository/index", b"{}").json()}
    assert index["1"]["reason"].startswith("standby"), index

    failures = []
    for _ in range(4):
        with pytest.raises(InferenceServerException) as failed:
            call(server, "scored", BAD)
        failures.append(failed.value.status())
    answered = call(server, "scored", BAD)

    assert failures == ["500"] * 4
    assert answered.get_response()["model_version"] == "1"
    assert answered.get_response()["parameters"]["fallback_reason"] == "circuit_open"
    np.testing.assert_array_equal(answered.as_numpy("Y"), np.arange(4, dtype=np.float32).reshape(2, 2))
    metadata = server.request("GET", "/v2/models/scored").json()
    assert metadata["versions"] == ["2"], "a standby is not served on its own"


def test_business_default_answers_when_nothing_can_serve(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    config = """
name: "pricing"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2 ] } ]
parameters { key: "FALLBACK_STRATEGY" value { string_value: "MODEL->BUSINESS" } }
parameters { key: "FALLBACK_BUSINESS_DEFAULT"
             value { string_value: '{"OUTPUT0": [9.5, 1], "OUTPUT1": [0, 0]}' } }
"""
    root = write_repository(tmp_path / "models", {"pricing": (add_sub_model(), config)})
    server = start_server(root)  # the graph's [N, 16] outputs disagree with the config: no version loads
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput(name, [3, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.zeros((3, 16), np.float32))

    result = client.infer("pricing", inputs)

    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[9.5, 1.0]] * 3)
    assert result.get_response().parameters["fallback_level"].string_param == "BUSINESS"
    assert result.get_response().parameters["fallback_reason"].string_param == "load_failed"
    assert fallbacks(server)[("pricing", "", "BUSINESS", "load_failed")] == 1


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        ('{ key: "FALLBACK_STRATEGY" value { string_value: "MODEL->GPU" } }', "unknown level 'GPU'"),
        (
            '{ key: "FALLBACK_STRATEGY" value { string_value: "BUSINESS" } }',
            "includes BUSINESS but the config has no FALLBACK_BUSINESS_DEFAULT",
        ),
        (
            '{ key: "FALLBACK_STRATEGY" value { string_value: "BUSINESS" } }\nparameters '
            '{ key: "FALLBACK_BUSINESS_DEFAULT" value { string_value: "{\\"OUTPUT9\\": [1]}" } }',
            "unknown: ['OUTPUT9'], missing: ['OUTPUT0', 'OUTPUT1']",
        ),
        (
            '{ key: "circuit_breaker.minimum_calls" value { string_value: "none" } }',
            "circuit_breaker.minimum_calls",
        ),
    ],
)
def test_bad_fallback_and_breaker_parameters_fail_the_model_by_name(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    parameters: str,
    reason: str,
) -> None:
    config = f'name: "bad"\nmax_batch_size: 8\nparameters {parameters}\n'
    root = write_repository(
        tmp_path_factory.mktemp("models"), {"bad": (add_sub_model(), config), "good": (add_sub_model(), None)}
    )
    server = start_server(root, "--strict-readiness", "false")

    entries = {e["name"]: e for e in server.request("POST", "/v2/repository/index", b"{}").json()}

    assert entries["bad"]["state"] == "UNAVAILABLE"
    assert reason in entries["bad"]["reason"], entries["bad"]
    assert entries["good"]["state"] == "READY"


@pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(),
    reason="describes a machine without the CUDA provider",
)
def test_a_gpu_model_without_cuda_fails_to_load_unless_cpu_is_in_the_strategy(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    gpu = "max_batch_size: 8\ninstance_group [ { count: 1 kind: KIND_GPU } ]\n"
    root = write_repository(
        tmp_path / "models",
        {
            "strict": (add_sub_model(), 'name: "strict"\n' + gpu),
            "lenient": (add_sub_model(), 'name: "lenient"\n' + gpu),
        },
    )
    server = start_server(root, "--strict-readiness", "false", "--fallback-strategy", "CPU")
    (root / "strict" / "config.pbtxt").write_text(
        'name: "strict"\n' + gpu + 'parameters { key: "FALLBACK_STRATEGY" value { string_value: "MODEL" } }\n'
    )
    strict = start_server(root, "--strict-readiness", "false")
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))

    result = client.infer("lenient", inputs)
    entries = {e["name"]: e for e in strict.request("POST", "/v2/repository/index", b"{}").json()}

    assert result.get_response()["parameters"] == {
        "fallback_level": "CPU",
        "fallback_reason": "gpu_unavailable",
    }
    assert entries["strict"]["state"] == "UNAVAILABLE"
    assert (
        "no CUDA provider" in entries["strict"]["reason"]
        and "add CPU to FALLBACK_STRATEGY" in entries["strict"]["reason"]
    )
    assert entries["lenient"]["state"] == "UNAVAILABLE", "without the server's --fallback-strategy CPU"


def test_a_bad_server_fallback_strategy_stops_the_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conch.cli.main",
            "serve",
            str(tmp_path),
            "--fallback-strategy",
            "MODEL->CPUS",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "--fallback-strategy has the unknown level 'CPUS'" in done.stderr
