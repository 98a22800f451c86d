"""A Python model's outputs are checked against its config: a wrong datatype, dims or batch dimension
is a 500 naming the model, the output, what the config says and what came back (Triton passes them
on as 200); ``output_check: warn`` logs it and passes the output on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures import python_models as models
from tests.integration.server_process import ServerProcess

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "CASE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "SCORES" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] }}
]
{extra}
"""

#: CASE 0 answers as the config says (TEXT as one str and one bytes); 1 returns SCORES as INT64,
#: 2 with 3 columns, 3 with one row more than the request's batch.
SHAPES = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            case = pb_utils.get_input_tensor_by_name(request, "CASE").as_numpy()
            rows = case.shape[0]
            scores = np.full((rows, 4), 0.5, np.float32)
            kind = int(case[0, 0])
            if kind == 1:
                scores = scores.astype(np.int64)
            elif kind == 2:
                scores = scores[:, :3]
            elif kind == 3:
                scores = np.full((rows + 1, 4), 0.5, np.float32)
            text = np.array([["ok", b"fine"]] * rows, dtype=object)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("SCORES", scores), pb_utils.Tensor("TEXT", text)])
            )
        return responses
"""

WARN = 'parameters { key: "output_check" value: { string_value: "warn" } }'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-outputs")
    models.write_python_model(root, "strict", CONFIG.format(name="strict", extra=""), SHAPES)
    models.write_python_model(root, "lenient", CONFIG.format(name="lenient", extra=WARN), SHAPES)
    loose = WARN.replace('"warn"', '"loose"')
    models.write_python_model(root, "bad_mode", CONFIG.format(name="bad_mode", extra=loose), SHAPES)
    return root


def _infer(module: Any, url: str, model: str, case: int, rows: int = 2) -> Any:
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("CASE", [rows, 1], "INT32")
    tensor.set_data_from_numpy(np.full((rows, 1), case, np.int32))
    return client.infer(model, [tensor])


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_outputs_as_the_config_says_pass_with_str_and_bytes(server: ServerProcess, module: Any) -> None:
    url = server.http_url if module is httpclient else server.grpc_url
    result = _infer(module, url, "strict", 0)
    np.testing.assert_array_equal(result.as_numpy("SCORES"), np.full((2, 4), 0.5, np.float32))
    assert result.as_numpy("TEXT").tolist() == [[b"ok", b"fine"]] * 2


@pytest.mark.parametrize(
    ("case", "came_back", "says"),
    [
        (1, "INT64 [2, 4]", "FP32 [2, 4]"),
        (2, "FP32 [2, 3]", "FP32 [2, 4]"),
        (3, "FP32 [3, 4]", "2 in this request"),
    ],
    ids=["datatype", "dims", "batch"],
)
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_wrong_output_is_a_500_that_says_what_and_why(
    server: ServerProcess, module: Any, case: int, came_back: str, says: str
) -> None:
    url = server.http_url if module is httpclient else server.grpc_url
    with pytest.raises(InferenceServerException) as raised:
        _infer(module, url, "strict", case)
    message = raised.value.message()
    assert "model 'strict'" in message and "output 'SCORES'" in message
    assert came_back in message and says in message
    status = raised.value.status()
    assert status in ("500", "StatusCode.INTERNAL"), status
    assert _infer(module, url, "strict", 0) is not None  # the model and the server keep serving


def test_output_check_warn_passes_the_output_on_and_logs_once(server: ServerProcess) -> None:
    for _ in range(3):
        result = _infer(grpcclient, server.grpc_url, "lenient", 1)
        assert result.as_numpy("SCORES").dtype == np.int64
    deadline = time.monotonic() + 10
    while "lenient" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    warnings = [line for line in server.log().splitlines() if "returned output 'SCORES' as INT64" in line]
    assert len(warnings) == 1 and "model 'lenient'" in warnings[0]


def test_an_unknown_output_check_fails_the_load_with_the_choices(server: ServerProcess) -> None:
    index = {entry["name"]: entry for entry in server.request("POST", "/v2/repository/index").json()}
    entry = index["bad_mode"]
    assert entry["state"] == "UNAVAILABLE"
    assert "output_check" in entry["reason"] and "'warn'" in entry["reason"], entry
