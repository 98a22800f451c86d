"""Triton python-backend model: the ``model.onnx`` beside this file, run by ONNX Runtime.

Triton's dynamic batcher hands ``execute`` the requests of one batch; they are concatenated into one
session call (default session options, as conch uses) and the output is split back per request.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One ONNX Runtime session per model instance."""

    def initialize(self, args: dict[str, Any]) -> None:
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def execute(self, requests: list[Any]) -> list[Any]:
        inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() for request in requests]
        outputs = self.session.run(["OUTPUT0"], {"INPUT0": np.concatenate(inputs)})[0]
        splits = np.cumsum([len(batch) for batch in inputs])[:-1]
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", part)])
            for part in np.split(outputs, splits)
        ]
