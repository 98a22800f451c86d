"""How the loader builds versions of the backends that call back into the server.

Python models (BLS) and ensembles (their steps) send requests through the server's own path, so
their builders need the server, which exists only after the loader does: ``conch serve`` registers
them here once both are made.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from conch.backends.kinds import BackendKind
from conch.backends.python.backend_config import BackendSetting, shared_memory_sizes
from conch.backends.python.process import ProcessSettings
from conch.backends.python.stub.conch_ipc import DEFAULT_SEGMENT_BYTES, GROWTH_BYTES
from conch.lifecycle.builders.ensembles import EnsembleBuilder
from conch.lifecycle.builders.python_models import PythonBackendSettings, PythonModelBuilder
from conch.lifecycle.builders.pytorch_models import PyTorchModelBuilder
from conch.lifecycle.loader import ModelLoader

if TYPE_CHECKING:
    from conch.server import InferenceServer


def register_backend_builders(
    loader: ModelLoader, server: InferenceServer, backend_config: tuple[BackendSetting, ...]
) -> None:
    """Python and ensemble versions, built with ``server``'s entry points (on the running loop), and
    PyTorch versions."""
    infer = functools.partial(server.infer, admitted=True)
    loader.builders[BackendKind.PYTHON] = PythonModelBuilder(
        PythonBackendSettings(
            python_process_settings(backend_config),
            infer,
            functools.partial(server.infer_stream, admitted=True),
            asyncio.get_running_loop(),
        )
    )
    loader.builders[BackendKind.ENSEMBLE] = EnsembleBuilder(infer, server.repository.models.get)
    loader.builders[BackendKind.PYTORCH] = PyTorchModelBuilder(loader.options)


def python_process_settings(backend_config: tuple[BackendSetting, ...]) -> ProcessSettings:
    """How Python models' processes start: the server's interpreter, ``--backend-config`` sizes."""
    sizes = shared_memory_sizes(backend_config)
    return ProcessSettings(
        shm_default_bytes=sizes.get("shm-default-byte-size", DEFAULT_SEGMENT_BYTES),
        shm_growth_bytes=sizes.get("shm-growth-byte-size", GROWTH_BYTES),
    )
