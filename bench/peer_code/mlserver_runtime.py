"""MLServer custom runtime: the model's ONNX file run by ONNX Runtime with default session options.

Adaptive batching (``max_batch_size``/``max_batch_time`` in ``model-settings.json``) merges requests
before ``predict`` and splits the response after it, so ``predict`` sees one batch.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OnnxMLP(MLModel):
    """Input ``INPUT0``, output ``OUTPUT0``, both FP32 with a leading batch dimension."""

    async def load(self) -> bool:
        self._session = ort.InferenceSession(
            await get_model_uri(self._settings), providers=["CPUExecutionProvider"]
        )
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        batch = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32, copy=False)
        output = self._session.run(["OUTPUT0"], {"INPUT0": batch})[0]
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("OUTPUT0", output)])
