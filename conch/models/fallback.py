"""The three-level fallback: previous version, then CPU, then a business default.

A model's ``FALLBACK_STRATEGY`` parameter (or the server's ``--fallback-strategy``) is an ordered
``->``-separated subset of the levels, ``MODEL->CPU->BUSINESS`` for example; none is the default.

- ``MODEL``: the newest version failed to load or warm up, or its circuit is open; requests that name
  no version go to the newest earlier version that serves (the last known good one).
- ``CPU``: a ``KIND_GPU`` instance cannot be created, or fails with a device error while running (CUDA
  out of memory, a lost device); the version runs on CPU instances instead. Without it, such a version
  fails to load, as in Triton, and a device error is the request's 500.
- ``BUSINESS``: nothing can serve; the answer is ``FALLBACK_BUSINESS_DEFAULT``, a JSON object of output
  name to the values of one row (shaped like the config's output dims), repeated for each request row.

This module holds the rules and their parsing; :mod:`conch.router.router` applies them per request.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError
from conch.models.strategy import STRATEGY_PARAMETER, FallbackLevel, parse_strategy
from conch.observability.events import emit

log = logging.getLogger(__name__)

BUSINESS_DEFAULT_PARAMETER = "FALLBACK_BUSINESS_DEFAULT"


class FallbackReason(enum.Enum):
    """Why a fallback answered: the fixed set that ``conch_fallback_total``'s ``reason`` takes."""

    LOAD_FAILED = "load_failed"
    WARMUP_FAILED = "warmup_failed"
    CIRCUIT_OPEN = "circuit_open"
    GPU_UNAVAILABLE = "gpu_unavailable"
    DEVICE_ERROR = "device_error"
    NO_VERSION = "no_version"


@dataclass(frozen=True)
class FallbackPolicy:
    """A model's strategy and, with ``BUSINESS``, its default answer for one row by output name."""

    levels: tuple[FallbackLevel, ...] = ()
    business_default: Mapping[str, np.ndarray] = field(default_factory=dict)

    def allows(self, level: FallbackLevel) -> bool:
        return level in self.levels


#: Words of the errors CUDA, cuBLAS and cuDNN raise when the device, not the request, is at fault.
DEVICE_ERROR_MARKERS = (
    "cuda error",
    "cuda failure",
    "cudaerror",
    "cuda out of memory",
    "out of memory",
    "cublas_status",
    "cudnn_status",
    "device lost",
    "illegal memory access",
    "device-side assert",
)


def is_device_error(message: str) -> bool:
    """Whether a failed run's message is a device error (the CPU fallback's trigger), by its words."""
    lowered = message.lower()
    return any(marker in lowered for marker in DEVICE_ERROR_MARKERS)


def strategy_from_config(
    config: mc.ModelConfig, default: tuple[FallbackLevel, ...]
) -> tuple[FallbackLevel, ...]:
    """The config's ``FALLBACK_STRATEGY``, or the server's ``default`` when it sets none."""
    if STRATEGY_PARAMETER not in config.parameters:
        return default
    return parse_strategy(config.parameters[STRATEGY_PARAMETER].string_value)


def policy_from_config(
    config: mc.ModelConfig, default: tuple[FallbackLevel, ...], outputs: mc.ModelConfig | None = None
) -> FallbackPolicy:
    """The model's policy: its own strategy or the server's, and its business default checked against
    the outputs of ``outputs`` (the completed config of a version; ``config`` itself by default)."""
    levels = strategy_from_config(config, default)
    has_default = BUSINESS_DEFAULT_PARAMETER in config.parameters
    if FallbackLevel.BUSINESS in levels and not has_default:
        raise InvalidArgumentError(
            f"{STRATEGY_PARAMETER} includes BUSINESS but the config has no {BUSINESS_DEFAULT_PARAMETER} "
            "parameter: give it as a JSON object of output name to one row's values"
        )
    business = business_default(config, outputs or config) if has_default else {}
    return FallbackPolicy(levels, business)


def business_default(config: mc.ModelConfig, completed: mc.ModelConfig) -> dict[str, np.ndarray]:
    """``FALLBACK_BUSINESS_DEFAULT`` read and checked against ``completed``'s outputs, one row each."""
    text = config.parameters[BUSINESS_DEFAULT_PARAMETER].string_value
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{BUSINESS_DEFAULT_PARAMETER} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidArgumentError(
            f"{BUSINESS_DEFAULT_PARAMETER} must be a JSON object of output name to values"
        )
    outputs = {entry.name: entry for entry in completed.output}
    missing = sorted(outputs.keys() - body.keys())
    unknown = sorted(body.keys() - outputs.keys())
    if unknown or missing:
        raise InvalidArgumentError(
            f"{BUSINESS_DEFAULT_PARAMETER} must give exactly the model's outputs {sorted(outputs)}; "
            f"unknown: {unknown}, missing: {missing}"
        )
    return {name: _row(name, body[name], outputs[name]) for name in sorted(outputs)}


def business_outputs(default: Mapping[str, np.ndarray], rows: int, batching: bool) -> dict[str, np.ndarray]:
    """The default answer for a request of ``rows`` rows (no batch dimension when not batching)."""
    if not batching:
        return dict(default)
    return {name: np.repeat(row[np.newaxis, ...], rows, axis=0) for name, row in default.items()}


def _row(name: str, values: object, output: mc.ModelOutput) -> np.ndarray:
    dims = [1 if d == -1 else int(d) for d in output.dims]
    datatype = datatypes.from_config_type(output.data_type)
    try:
        array = np.asarray(values, dtype=object if datatype.name == "BYTES" else datatype.numpy)
        shaped = array.reshape(dims)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{BUSINESS_DEFAULT_PARAMETER}: output '{name}' needs {datatype.name} values of shape {dims} "
            f"(one row), got {json.dumps(values)[:80]}"
        ) from None
    if datatype.name == "BYTES":
        shaped = np.vectorize(lambda v: str(v).encode(), otypes=[object])(shaped)
    return shaped


def mark_cpu_fallback(version: ModelVersionLike, reason: FallbackReason, **detail: object) -> None:
    """``version`` now answers on CPU instances for ``reason``: every answer says so, and it is logged."""
    version.fallback_marker = (FallbackLevel.CPU, reason)
    emit(
        log,
        "fallback",
        logging.WARNING,
        model=version.name,
        version=version.version,
        level=FallbackLevel.CPU.value,
        reason=reason.value,
        **detail,
    )


class ModelVersionLike(Protocol):
    """What :func:`mark_cpu_fallback` needs of a served version (``conch.models.model`` imports this
    module, so the type is named by shape)."""

    name: str
    version: int
    fallback_marker: tuple[FallbackLevel | None, FallbackReason | None]
