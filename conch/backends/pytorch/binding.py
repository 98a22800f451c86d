"""A PyTorch model's config completed from its program and bound to the program's positions.

A ``torch.export`` program gives its tensors, so what the config leaves out is completed as conch
does for ONNX (inputs named as the forward arguments, outputs ``OUTPUT__<i>``, ``max_batch_size``
from a dynamic first dimension), and what it says is checked against the program with the same rules.
A TorchScript module gives nothing of the kind: its config must say it, or the load fails naming
what is missing.
"""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.pytorch.instance import Binding
from conch.backends.pytorch.naming import input_positions, output_positions
from conch.backends.pytorch.program import Program
from conch.backends.signature import ModelSignature, TensorSignature
from conch.core import datatypes
from conch.core.errors import InvalidArgumentError
from conch.repository import autocomplete, config_validation

_EXAMPLE = (
    'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ] '
    'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]'
)


def complete_config(
    config: mc.ModelConfig, program: Program, fields: set[str], default_max_batch_size: int
) -> None:
    """Fill what the program can tell; check the whole config against it (raise the first problem)."""
    if program.signature is None:
        _require_declared(config)
        config_validation.check_batching(config)
        return
    autocomplete.complete_from_signature(config, program.signature, fields, default_max_batch_size)
    config_validation.check_against_signature(config, bound_signature(config, program, program.signature))


def bound_signature(config: mc.ModelConfig, program: Program, signature: ModelSignature) -> ModelSignature:
    """The program's tensors under the config's names, by Triton's binding rules, for the checks."""
    names = [entry.name for entry in config.input]
    positions = input_positions(names, program.argument_names, config.name)
    inputs = tuple(_renamed(signature.inputs[p], n) for n, p in zip(names, positions, strict=True))
    out_names = [entry.name for entry in config.output]
    out_positions = output_positions(out_names, len(signature.outputs), config.name)
    outputs = tuple(_renamed(signature.outputs[p], n) for n, p in zip(out_names, out_positions, strict=True))
    return ModelSignature(inputs, outputs)


def bind(config: mc.ModelConfig, program: Program) -> Binding:
    """Where each config tensor goes in the program, and the shapes and dtypes on the way."""
    for role, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            if entry.data_type == mc.TYPE_STRING:
                raise InvalidArgumentError(
                    f"model '{config.name}': {role} '{entry.name}' is TYPE_STRING; the PyTorch backend "
                    "serves numeric and boolean tensors"
                )
    names = [entry.name for entry in config.input]
    out_names = [entry.name for entry in config.output]
    results = None if program.signature is None else len(program.signature.outputs)
    return Binding(
        inputs=dict(zip(names, input_positions(names, program.argument_names, config.name), strict=True)),
        outputs=dict(zip(out_names, output_positions(out_names, results, config.name), strict=True)),
        input_reshape={e.name: tuple(e.reshape.shape) for e in config.input if e.HasField("reshape")},
        output_dims={e.name: tuple(e.dims) for e in config.output if e.HasField("reshape")},
        batching=config.max_batch_size > 0,
        output_dtypes={
            e.name: np.dtype(datatypes.from_config_type(e.data_type).numpy) for e in config.output
        },
    )


def _renamed(tensor: TensorSignature, name: str) -> TensorSignature:
    return TensorSignature(name, tensor.datatype, tensor.shape)


def _require_declared(config: mc.ModelConfig) -> None:
    missing = [
        f"{role} (none listed)"
        for role, entries in (("input", config.input), ("output", config.output))
        if not entries
    ]
    for role, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            if entry.data_type == mc.TYPE_INVALID:
                missing.append(f"{role} '{entry.name}' data_type")
            if not entry.dims:
                missing.append(f"{role} '{entry.name}' dims")
    if missing:
        raise InvalidArgumentError(
            f"model '{config.name}': a TorchScript {config.default_model_filename} carries no tensor "
            "datatypes or shapes, so config.pbtxt must list every input and output with name, data_type "
            f"and dims; missing: {', '.join(missing)}. For example: {_EXAMPLE}"
        )
