"""Checks a completed config against Triton's rules and against the model graph it describes.

Each failure is an :class:`InvalidArgumentError` whose message names the exact field, so a model that
fails here shows up as UNAVAILABLE with a reason the user can act on.
"""

from __future__ import annotations

import logging

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.signature import ModelSignature, TensorSignature
from conch.core import datatypes
from conch.core.errors import InvalidArgumentError
from conch.repository.autocomplete import ONNX_BACKEND, ONNX_PLATFORM
from conch.repository.config import is_dns_safe

log = logging.getLogger(__name__)


def check_identity(config: mc.ModelConfig, folder_name: str) -> None:
    """The config's name must be its folder's, and the platform one conch can run."""
    if config.name != folder_name:
        raise InvalidArgumentError(f"config name '{config.name}' does not match its folder '{folder_name}'")
    if not is_dns_safe(folder_name):
        log.warning(
            "model name '%s' is not DNS-safe (lower case letters, digits and '-', at most 63): "
            "it cannot be used as-is in Kubernetes resource names",
            folder_name,
        )
    if config.platform not in ("", ONNX_PLATFORM) or config.backend not in ("", ONNX_BACKEND):
        raise InvalidArgumentError(
            f"platform '{config.platform}' / backend '{config.backend}' is not supported; "
            f"use platform '{ONNX_PLATFORM}' or backend '{ONNX_BACKEND}'"
        )
    if config.max_batch_size < 0:
        raise InvalidArgumentError("max_batch_size must be >= 0")


def check_against_signature(config: mc.ModelConfig, signature: ModelSignature) -> None:
    """Every config input and output exists in the graph with the same datatype and a compatible shape."""
    batching = config.max_batch_size > 0
    graph_inputs = {t.name: t for t in signature.inputs}
    graph_outputs = {t.name: t for t in signature.outputs}
    for entry in config.input:
        _check_tensor("input", entry, graph_inputs, batching)
    for entry in config.output:
        _check_tensor("output", entry, graph_outputs, batching)
    declared = {entry.name for entry in config.input}
    missing = [name for name in graph_inputs if name not in declared]
    if missing:
        raise InvalidArgumentError(f"config has no input for graph input(s) {missing}")


def _check_tensor(
    role: str,
    entry: mc.ModelInput | mc.ModelOutput,
    graph: dict[str, TensorSignature],
    batching: bool,
) -> None:
    tensor = graph.get(entry.name)
    if tensor is None:
        raise InvalidArgumentError(
            f"config {role} '{entry.name}' is not in the model; the model's {role}s are {sorted(graph)}"
        )
    config_type = datatypes.from_config_type(entry.data_type)
    if config_type.name != tensor.datatype:
        raise InvalidArgumentError(
            f"config {role} '{entry.name}' has data_type {datatypes.config_type_name(entry.data_type)} "
            f"but the model's is {datatypes.from_name(tensor.datatype).name}"
        )
    model_dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
    expected = ([-1] if batching else []) + model_dims
    actual = [-1 if d is None else d for d in tensor.shape]
    if batching and (not tensor.shape or tensor.shape[0] is not None):
        raise InvalidArgumentError(
            f"max_batch_size > 0 needs a dynamic first dimension, but model {role} '{entry.name}' "
            f"has shape {actual}"
        )
    if len(expected) != len(actual) or any(g != -1 and c != g for c, g in zip(expected, actual, strict=True)):
        where = "reshape" if entry.HasField("reshape") else "dims"
        raise InvalidArgumentError(
            f"config {role} '{entry.name}' {where} {model_dims} (full shape {expected}) do not match "
            f"the model's shape {actual}"
        )
