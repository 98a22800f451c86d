"""Checks an inference request against its model's config before anything runs.

Every failure is a 400 that names the model and the offending input or output, so a client can fix
the call without reading server logs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest


def validate_request(
    request: InferenceRequest, config: mc.ModelConfig
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The request's inputs by name and the output names to compute, once they fit ``config``."""
    model = config.name
    expected = {entry.name: entry for entry in config.input}
    inputs: dict[str, np.ndarray] = {}
    for tensor in request.inputs:
        entry = expected.get(tensor.name)
        if entry is None:
            raise InvalidArgumentError(
                f"unexpected inference input '{tensor.name}' for model '{model}'; "
                f"its inputs are {sorted(expected)}"
            )
        if tensor.name in inputs:
            raise InvalidArgumentError(f"input '{tensor.name}' is given more than once")
        want = datatypes.from_config_type(entry.data_type).name
        if tensor.datatype != want:
            raise InvalidArgumentError(
                f"input '{tensor.name}' has datatype {tensor.datatype} but model '{model}' expects {want}"
            )
        inputs[tensor.name] = tensor.data
    missing = [name for name, entry in expected.items() if name not in inputs and not entry.optional]
    if missing:
        raise InvalidArgumentError(f"model '{model}' expects input(s) {missing} that the request lacks")
    _check_shapes(inputs, config)
    return inputs, _output_names(request, config)


def _check_shapes(inputs: dict[str, np.ndarray], config: mc.ModelConfig) -> None:
    batching = config.max_batch_size > 0
    batch_sizes = set()
    for entry in config.input:
        array = inputs.get(entry.name)
        if array is None:
            continue
        shape = array.shape
        dims = list(entry.dims)
        if batching:
            if not shape or shape[0] < 1:
                raise InvalidArgumentError(
                    f"input '{entry.name}' for model '{config.name}' needs a batch dimension >= 1, "
                    f"got shape {list(shape)}"
                )
            if shape[0] > config.max_batch_size:
                raise InvalidArgumentError(
                    f"input '{entry.name}' has batch size {shape[0]} but model '{config.name}' allows at "
                    f"most {config.max_batch_size} (max_batch_size)"
                )
            batch_sizes.add(shape[0])
            shape = shape[1:]
        if not _dims_match(shape, dims):
            full = ([-1] if batching else []) + dims
            raise InvalidArgumentError(
                f"input '{entry.name}' has shape {list(array.shape)} but model '{config.name}' expects {full}"
            )
    if len(batch_sizes) > 1:
        raise InvalidArgumentError(
            f"inputs of one request must share one batch size, got {sorted(batch_sizes)}"
        )


def _dims_match(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def _output_names(request: InferenceRequest, config: mc.ModelConfig) -> list[str]:
    known = [entry.name for entry in config.output]
    if not request.outputs:
        return known
    names = []
    for output in request.outputs:
        if output.name not in known:
            raise InvalidArgumentError(
                f"unexpected inference output '{output.name}' for model '{config.name}'; "
                f"its outputs are {known}"
            )
        names.append(output.name)
    return names
