"""Which backend runs a model, from its config's ``platform`` and ``backend`` as Triton reads them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"
PYTHON_BACKEND = "python"
ENSEMBLE_PLATFORM = "ensemble"
PYTORCH_PLATFORM = "pytorch_libtorch"
PYTORCH_BACKEND = "pytorch"


class BackendKind(Enum):
    """The backends conch runs."""

    ONNX = "onnxruntime"
    PYTHON = "python"
    ENSEMBLE = "ensemble"
    PYTORCH = "pytorch"


def backend_kind(config: mc.ModelConfig) -> BackendKind:
    """The backend of a config whose platform and backend passed the identity check."""
    if config.backend == PYTHON_BACKEND:
        return BackendKind.PYTHON
    if config.platform == ENSEMBLE_PLATFORM:
        return BackendKind.ENSEMBLE
    if config.platform == PYTORCH_PLATFORM or config.backend == PYTORCH_BACKEND:
        return BackendKind.PYTORCH
    return BackendKind.ONNX


def infer_backend(config: mc.ModelConfig, folder: Path) -> None:
    """A config that names no platform, backend or file gets the backend its files show, as Triton's
    auto-complete does: version folders holding ``model.py`` and no ``model.onnx`` are a Python model;
    ``model.pt`` or ``model.pt2`` (and neither of the others) a PyTorch model."""
    if config.platform or config.backend or config.default_model_filename:
        return
    versions = [p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()] if folder.is_dir() else []
    if any((v / "model.onnx").is_file() for v in versions):
        return
    if any((v / "model.py").is_file() for v in versions):
        config.backend = PYTHON_BACKEND
    elif any((v / name).is_file() for v in versions for name in ("model.pt", "model.pt2")):
        config.backend = PYTORCH_BACKEND


def supported(config: mc.ModelConfig) -> bool:
    """Whether conch runs this platform/backend pair (empty fields mean ONNX, completed later)."""
    if config.backend == PYTHON_BACKEND:
        return config.platform == ""
    if config.platform == ENSEMBLE_PLATFORM:
        return config.backend == ""
    if config.platform == PYTORCH_PLATFORM or config.backend == PYTORCH_BACKEND:
        return config.platform in ("", PYTORCH_PLATFORM) and config.backend in ("", PYTORCH_BACKEND)
    return config.platform in ("", ONNX_PLATFORM) and config.backend in ("", ONNX_BACKEND)
