"""Checks of the ONNX file itself: it loads, passes ``onnx.checker``, and holds no training-mode leftovers.

A model exported from a module left in training mode keeps layers that behave differently per call or
per batch. Severities:

- ``Dropout`` whose ``training_mode`` is the constant true (or, before opset 7, ``is_test`` 0) drops
  random units on every request: an error.
- ``Dropout`` whose ``training_mode`` is computed or fed by a graph input can be switched on by a
  caller: a warning, since the default run is deterministic.
- ``BatchNormalization`` with ``training_mode`` 1, or with the extra outputs (running or saved mean and
  variance) that only its training form has, normalizes each batch with its own statistics, so a row's
  answer depends on the other rows: an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from conch.core.findings import Finding, Severity

_STANDARD_DOMAINS = ("", "ai.onnx")


def load_graph(model_file: Path, model: str, field: str) -> tuple[onnx.ModelProto | None, list[Finding]]:
    """The parsed model, without external data (not needed here), or a finding saying it is not ONNX."""
    try:
        return onnx.load(str(model_file), load_external_data=False), []
    except (DecodeError, OSError, ValueError) as exc:
        return None, [
            Finding(
                "model-file-invalid",
                Severity.ERROR,
                model,
                field,
                f"{model_file.name} is not an ONNX model: {exc}",
                "export the model to ONNX again (a truncated download or a file of another format looks "
                "like this)",
            )
        ]


def checker_findings(model_file: Path, model: str, field: str) -> list[Finding]:
    """``onnx.checker`` with ``full_check`` (strict shape inference); given the path so large models work."""
    try:
        onnx.checker.check_model(str(model_file), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        reason = str(exc).replace(str(model_file.parent), "").strip()
        return [
            Finding(
                "model-file-invalid",
                Severity.ERROR,
                model,
                field,
                f"{model_file.name} fails onnx.checker: {reason}",
                "re-export with a supported opset and check the exporter's warnings; "
                "onnx.checker.check_model(path, full_check=True) reproduces this",
            )
        ]
    return []


def training_mode_findings(proto: onnx.ModelProto, model: str, field: str) -> list[Finding]:
    """Dropout and BatchNormalization nodes left in their training form (severities: module docstring)."""
    constants = _constant_values(proto.graph)
    graph_inputs = {value.name for value in proto.graph.input}
    found: list[Finding] = []
    for index, node in enumerate(_nodes(proto.graph)):
        if node.domain not in _STANDARD_DOMAINS:
            continue
        where = f"{field} node '{node.name}'" if node.name else f"{field} node #{index} ({node.op_type})"
        if node.op_type == "Dropout":
            found += _dropout_findings(node, constants, graph_inputs, model, where)
        elif node.op_type == "BatchNormalization" and _batchnorm_trains(node):
            found.append(
                Finding(
                    "batchnorm-training-mode",
                    Severity.ERROR,
                    model,
                    where,
                    "BatchNormalization is in training form: it normalizes with each batch's statistics, "
                    "so a row's result depends on the rows batched with it",
                    "export in eval mode (model.eval() for torch, training=TrainingMode.EVAL)",
                )
            )
    return found


def _dropout_findings(
    node: onnx.NodeProto,
    constants: dict[str, np.ndarray],
    graph_inputs: set[str],
    model: str,
    where: str,
) -> list[Finding]:
    is_test = _attribute(node, "is_test")
    mode = node.input[2] if len(node.input) > 2 else ""
    if is_test == 0 or (mode in constants and bool(constants[mode].all())):
        return [
            Finding(
                "dropout-training-mode",
                Severity.ERROR,
                model,
                where,
                "Dropout is in training mode: it zeroes random units, so the same input gives different "
                "outputs",
                "export in eval mode (model.eval() for torch, training=TrainingMode.EVAL)",
            )
        ]
    if mode and mode not in constants:
        origin = "graph input" if mode in graph_inputs else "computed value"
        return [
            Finding(
                "dropout-training-switchable",
                Severity.WARNING,
                model,
                where,
                f"Dropout's training_mode comes from the {origin} '{mode}', so it can be switched on",
                "export in eval mode so that Dropout has no training_mode input",
            )
        ]
    return []


def _batchnorm_trains(node: onnx.NodeProto) -> bool:
    extra_outputs = [name for name in node.output[1:] if name]
    return _attribute(node, "training_mode") == 1 or _attribute(node, "is_test") == 0 or bool(extra_outputs)


def _attribute(node: onnx.NodeProto, name: str) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return None


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node, including those of subgraphs (``If`` branches, ``Loop`` and ``Scan`` bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from _nodes(subgraph)


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Small constants (initializers and ``Constant`` nodes) by name: where ``training_mode`` comes from."""
    values = {
        tensor.name: numpy_helper.to_array(tensor)
        for tensor in graph.initializer
        if tensor.data_location != onnx.TensorProto.EXTERNAL and math.prod(tensor.dims) <= 1
    }
    for node in _nodes(graph):
        value = _attribute(node, "value") if node.op_type == "Constant" else None
        if isinstance(value, onnx.TensorProto) and node.output:
            values[node.output[0]] = numpy_helper.to_array(value)
    return values
