"""Which backend runs a model, from its config's ``platform`` and ``backend`` as Triton reads them."""

from __future__ import annotations

from enum import Enum

from tritonclient.grpc import model_config_pb2 as mc

ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"
PYTHON_BACKEND = "python"
ENSEMBLE_PLATFORM = "ensemble"


class BackendKind(Enum):
    """The backends conch runs."""

    ONNX = "onnxruntime"
    PYTHON = "python"
    ENSEMBLE = "ensemble"


def backend_kind(config: mc.ModelConfig) -> BackendKind:
    """The backend of a config whose platform and backend passed the identity check."""
    if config.backend == PYTHON_BACKEND:
        return BackendKind.PYTHON
    if config.platform == ENSEMBLE_PLATFORM:
        return BackendKind.ENSEMBLE
    return BackendKind.ONNX


def supported(config: mc.ModelConfig) -> bool:
    """Whether conch runs this platform/backend pair (empty fields mean ONNX, completed later)."""
    if config.backend == PYTHON_BACKEND:
        return config.platform == ""
    if config.platform == ENSEMBLE_PLATFORM:
        return config.backend == ""
    return config.platform in ("", ONNX_PLATFORM) and config.backend in ("", ONNX_BACKEND)
