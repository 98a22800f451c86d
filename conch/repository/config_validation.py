"""Checks a completed config against Triton's rules and against the model graph it describes.

The rules live here once and produce :class:`Finding` objects, so two users share them:

- the server (:func:`check_identity`, :func:`check_against_signature`) raises the first error as an
  :class:`InvalidArgumentError`, and the model shows as UNAVAILABLE with that reason;
- ``conch validate`` reports every finding. Both run :func:`batching_findings` and
  :func:`reshape_findings` too, which Triton also refuses at load.

Each finding's ``field`` names the exact place in the config (``input[0].dims``).
"""

from __future__ import annotations

import logging
import math
from typing import TypeAlias

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import ONNX_BACKEND, ONNX_PLATFORM, supported
from conch.backends.signature import ModelSignature, TensorSignature
from conch.core import datatypes
from conch.core.errors import ConchError, InvalidArgumentError
from conch.core.findings import Finding, Severity
from conch.repository.config import is_dns_safe
from conch.repository.sequence_config import fed_input_names, sequence_signature_findings
from conch.repository.sequence_config_checks import sequence_findings

log = logging.getLogger(__name__)

ConfigTensor: TypeAlias = mc.ModelInput | mc.ModelOutput


def identity_findings(config: mc.ModelConfig, folder_name: str) -> list[Finding]:
    """The config's name must be its folder's, and the platform one conch can run."""
    found = []
    if config.name != folder_name:
        found.append(
            _error(
                "name-mismatch",
                folder_name,
                "name",
                f"config name '{config.name}' does not match its folder '{folder_name}'",
                f"set name: \"{folder_name}\" in config.pbtxt, or rename the folder to '{config.name}'",
            )
        )
    if not is_dns_safe(folder_name):
        found.append(
            Finding(
                "name-not-dns-safe",
                Severity.WARNING,
                folder_name,
                "name",
                f"model name '{folder_name}' is not DNS-safe "
                "(lower case letters, digits and '-', at most 63)",
                "it cannot be used as-is in Kubernetes resource names; rename the folder and the config's "
                "name, e.g. 'fraud-model'",
            )
        )
    if not supported(config):
        found.append(
            _error(
                "platform-unsupported",
                folder_name,
                "platform" if config.platform not in ("", ONNX_PLATFORM) else "backend",
                f"platform '{config.platform}' / backend '{config.backend}' is not supported; "
                f"use platform '{ONNX_PLATFORM}' or backend '{ONNX_BACKEND}', backend 'python', "
                "platform 'pytorch_libtorch' / backend 'pytorch', or platform 'ensemble'",
                "conch runs ONNX models, PyTorch models, Triton Python-backend models and ensembles: "
                f'export the model to ONNX and set platform: "{ONNX_PLATFORM}", or write a model.py and set '
                'backend: "python"',
            )
        )
    if config.max_batch_size < 0:
        found.append(
            _error(
                "max-batch-size-negative",
                folder_name,
                "max_batch_size",
                "max_batch_size must be >= 0",
                "use 0 for a model without a batch dimension, or the largest batch it accepts",
            )
        )
    return found


def signature_findings(config: mc.ModelConfig, signature: ModelSignature, model: str) -> list[Finding]:
    """Every config input and output exists in the graph with the same datatype and a compatible shape."""
    batching = config.max_batch_size > 0
    graph_inputs = {t.name: t for t in signature.inputs}
    graph_outputs = {t.name: t for t in signature.outputs}
    found = []
    for index, entry in enumerate(config.input):
        found += _tensor_findings(model, f"input[{index}]", "input", entry, graph_inputs, batching)
    for index, entry in enumerate(config.output):
        found += _tensor_findings(model, f"output[{index}]", "output", entry, graph_outputs, batching)
    # The sequence batcher's controls and states are graph inputs the config names elsewhere.
    declared = {entry.name for entry in config.input} | fed_input_names(config)
    missing = [name for name in graph_inputs if name not in declared]
    if missing:
        found.append(
            _error(
                "graph-input-undeclared",
                model,
                "input",
                f"config has no input for graph input(s) {missing}",
                "add an input entry for each graph input, or remove all input entries to let conch "
                "complete them from the graph",
            )
        )
    return found + sequence_signature_findings(config, signature, model)


def batching_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    """The scheduler's section: ``dynamic_batching`` (a batching model, preferred sizes in
    ``1..max_batch_size``) and ``sequence_batching`` (:mod:`conch.repository.sequence_config`)."""
    return _dynamic_batching_findings(config, model) + sequence_findings(config, model)


def _dynamic_batching_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    if not config.HasField("dynamic_batching"):
        return []
    if config.max_batch_size == 0:
        return [
            _error(
                "dynamic-batching-without-batching",
                model,
                "dynamic_batching",
                "dynamic_batching is set but max_batch_size is 0, so requests can never be batched",
                "remove dynamic_batching, or set max_batch_size above 0 if the graph's first dimension "
                "is a dynamic batch dimension",
            )
        ]
    return [
        _error(
            "preferred-batch-size-invalid",
            model,
            f"dynamic_batching.preferred_batch_size[{index}]",
            f"preferred_batch_size {size} is not between 1 and max_batch_size {config.max_batch_size}",
            "list batch sizes the batcher may aim for, each from 1 to max_batch_size",
        )
        for index, size in enumerate(config.dynamic_batching.preferred_batch_size)
        if size <= 0 or size > config.max_batch_size
    ]


def reshape_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    """A ``reshape`` must hold as many elements as the ``dims`` it reshapes (when both are fixed)."""
    found = []
    for role, entries in (("input", config.input), ("output", config.output)):
        for index, entry in enumerate(entries):
            if not entry.HasField("reshape") or -1 in entry.dims or -1 in entry.reshape.shape:
                continue
            dims, shape = list(entry.dims), list(entry.reshape.shape)
            if math.prod(dims) != math.prod(shape):
                found.append(
                    _error(
                        "reshape-size-mismatch",
                        model,
                        f"{role}[{index}].reshape",
                        f"config {role} '{entry.name}' dims {dims} hold {math.prod(dims)} elements but "
                        f"reshape {shape} holds {math.prod(shape)}",
                        "dims is what clients send, reshape what the graph gets: both must hold the same "
                        "number of elements",
                    )
                )
    return found


def check_identity(config: mc.ModelConfig, folder_name: str) -> None:
    """The server's load-time identity check: raise the first error, log the warnings."""
    _raise_first_error(identity_findings(config, folder_name))


def check_batching(config: mc.ModelConfig) -> None:
    """The batching rules alone, for backends without a graph to check against (Python models)."""
    _raise_first_error(batching_findings(config, config.name))


def check_against_signature(config: mc.ModelConfig, signature: ModelSignature) -> None:
    """The server's load-time check of the completed config against the graph, its batching and its
    reshapes: raise the first error, as Triton refuses such a model at load."""
    _raise_first_error(
        signature_findings(config, signature, config.name)
        + batching_findings(config, config.name)
        + reshape_findings(config, config.name)
    )


def _raise_first_error(found: list[Finding]) -> None:
    for finding in found:
        if finding.is_error:
            raise InvalidArgumentError(finding.message)
        log.warning("%s: %s", finding.message, finding.hint)


def _tensor_findings(
    model: str,
    field: str,
    role: str,
    entry: ConfigTensor,
    graph: dict[str, TensorSignature],
    batching: bool,
) -> list[Finding]:
    tensor = graph.get(entry.name)
    if tensor is None:
        return [
            _error(
                "tensor-not-in-model",
                model,
                f"{field}.name",
                f"config {role} '{entry.name}' is not in the model; the model's {role}s are {sorted(graph)}",
                f"use one of the graph's {role} names, or leave {role} out to let conch complete it",
            )
        ]
    found = []
    datatype_finding = _datatype_finding(model, field, role, entry, tensor)
    if datatype_finding is not None:
        found.append(datatype_finding)
    found += _shape_findings(model, field, role, entry, tensor, batching)
    return found


def _datatype_finding(
    model: str, field: str, role: str, entry: ConfigTensor, tensor: TensorSignature
) -> Finding | None:
    try:
        config_type = datatypes.from_config_type(entry.data_type)
    except ConchError as exc:
        return _error("datatype-mismatch", model, f"{field}.data_type", exc.message, _DATATYPE_HINT)
    if config_type.name == tensor.datatype:
        return None
    graph_type = datatypes.from_name(tensor.datatype)
    return _error(
        "datatype-mismatch",
        model,
        f"{field}.data_type",
        f"config {role} '{entry.name}' has data_type {datatypes.config_type_name(entry.data_type)} "
        f"but the model's is {graph_type.name}",
        f"set data_type: {datatypes.config_type_name(graph_type.config_type)}",
    )


_DATATYPE_HINT = "use the data type of the graph's tensor (TYPE_FP32 for float, TYPE_STRING for strings)"


def _shape_findings(
    model: str, field: str, role: str, entry: ConfigTensor, tensor: TensorSignature, batching: bool
) -> list[Finding]:
    model_dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
    expected = ([-1] if batching else []) + model_dims
    actual = [-1 if d is None else d for d in tensor.shape]
    if batching and (not tensor.shape or tensor.shape[0] is not None):
        return [
            _error(
                "batch-dim-not-dynamic",
                model,
                "max_batch_size",
                f"max_batch_size > 0 needs a dynamic first dimension, but model {role} '{entry.name}' "
                f"has shape {actual}",
                "set max_batch_size: 0 (no batching), or export the model with a dynamic first (batch) axis",
            )
        ]
    if len(expected) == len(actual) and all(g == -1 or c == g for c, g in zip(expected, actual, strict=True)):
        return []
    where = "reshape" if entry.HasField("reshape") else "dims"
    hint_shape = actual[1:] if batching else actual
    return [
        _error(
            "dims-mismatch",
            model,
            f"{field}.{where}",
            f"config {role} '{entry.name}' {where} {model_dims} (full shape {expected}) do not match "
            f"the model's shape {actual}",
            f"set {where}: {hint_shape}"
            + (" (without the batch dimension, which max_batch_size adds)" if batching else ""),
        )
    ]


def _error(code: str, model: str, field: str, message: str, hint: str) -> Finding:
    return Finding(code, Severity.ERROR, model, field, message, hint)
