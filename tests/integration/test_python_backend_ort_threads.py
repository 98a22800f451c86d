"""ONNX Runtime sessions inside a Python model let their idle threads sleep unless the model says.

Each model runs a real ONNX Runtime session (``OUTPUT0 = INPUT0 * 2``) and answers, beside its
output, the ``session.intra_op.allow_spinning`` entry its session was created with, read back from
the session itself. A session made with default options, one made with the model's own options, and
one whose ``onnxruntime`` is imported only inside ``initialize`` all sleep (``0``); a model that sets
the entry to ``1`` keeps it, and its other options stay as it set them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures import python_models as models
from tests.fixtures.onnx_models import scale_model
from tests.integration.server_process import ServerProcess

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "SPINNING" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "LEVEL" data_type: TYPE_INT32 dims: [ 1 ] }}
]
"""

#: ``{imports}`` at the top of the file, ``{session}`` in ``initialize`` (``path``: the ONNX file).
CODE = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils
{imports}


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        {session}
        options = self.session.get_session_options()
        try:
            self.spinning = options.get_session_config_entry("session.intra_op.allow_spinning")
        except RuntimeError:
            self.spinning = "unset"
        self.level = int(options.graph_optimization_level)

    def execute(self, requests):
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            (y,) = self.session.run(["OUTPUT0"], {{"INPUT0": x}})
            rows = len(x)
            spinning = np.array([[self.spinning.encode()]] * rows, dtype=np.object_)
            level = np.full((rows, 1), self.level, dtype=np.int32)
            answers.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", y),
                pb_utils.Tensor("SPINNING", spinning),
                pb_utils.Tensor("LEVEL", level),
            ]))
        return answers
"""

MODELS = {
    "defaults": ("import onnxruntime as ort", "self.session = ort.InferenceSession(path)"),
    "own_options": (
        "import onnxruntime as ort",
        "options = ort.SessionOptions()\n"
        "        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC\n"
        "        self.session = ort.InferenceSession(path, sess_options=options)",
    ),
    "imported_late": (
        "",
        "import onnxruntime\n        self.session = onnxruntime.InferenceSession(path)",
    ),
    "spins_by_choice": (
        "import onnxruntime as ort",
        "options = ort.SessionOptions()\n"
        '        options.add_session_config_entry("session.intra_op.allow_spinning", "1")\n'
        "        self.session = ort.InferenceSession(path, options)",
    ),
}
BASIC = 1  # ORT_ENABLE_BASIC
ALL = 99  # ORT_ENABLE_ALL, ONNX Runtime's default


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root: Path = tmp_path_factory.mktemp("python-ort-threads")
    for name, (imports, session) in MODELS.items():
        folder = models.write_python_model(
            root, name, CONFIG.format(name=name), CODE.format(imports=imports, session=session)
        )
        onnx.save(scale_model(2.0), folder / "1" / "model.onnx")
    return start_server(root)


def answer(server: ServerProcess, model: str) -> tuple[np.ndarray, str, int]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    tensor = grpcclient.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    spinning = result.as_numpy("SPINNING")
    level = result.as_numpy("LEVEL")
    assert spinning is not None and level is not None
    return result.as_numpy("OUTPUT0"), spinning[0, 0].decode(), int(level[0, 0])


@pytest.mark.parametrize(
    ("model", "spinning", "level"),
    [
        ("defaults", "0", ALL),
        ("own_options", "0", BASIC),
        ("imported_late", "0", ALL),
        ("spins_by_choice", "1", ALL),
    ],
)
def test_a_sessions_idle_threads_sleep_unless_the_model_set_it(
    server: ServerProcess, model: str, spinning: str, level: int
) -> None:
    output, seen_spinning, seen_level = answer(server, model)

    np.testing.assert_array_equal(output, np.arange(8, dtype=np.float32).reshape(2, 4) * 2)
    assert (seen_spinning, seen_level) == (spinning, level)
