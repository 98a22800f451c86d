"""A PyTorch model's config bound to the program's positions, by Triton's binding rules.

:func:`bound_signature` gives the program's tensors under the config's names (what the builder checks
the config against); :func:`bind` says where each config tensor goes in the program.
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
