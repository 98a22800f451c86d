"""The inputs the runtime checks run on, in the shapes clients send (config dims, batch dimension first).

The warm-up sample is used when the config has one, so the checks run on data the model is meant for.
Otherwise the data is random, seeded so that a run can be repeated: standard normal floats, integers
from 0 to 3 (valid indices or category codes for most models), booleans, and one-letter strings. A
variable dimension gets size :data:`VARIABLE_DIM_SIZE`. A model with ``sequence_batching`` also gets the
controls and initial state the sequence batcher feeds a sequence's first request.

A batching model gets a batch of several rows. With a warm-up sample the first row is the sample and
the others vary its floating-point values (NaNs stay NaN) while keeping its integers, booleans and
strings, which are often categories: the rows differ yet stay in the model's domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.datatypes import Datatype
from conch.repository.warmup import read_warmup_file
from conch.scheduling.sequence_settings import SequenceSettings
from conch.validation.warmup import WarmupInput, first_sample

VARIABLE_DIM_SIZE = 2
_STRINGS = np.array([b"a", b"b", b"c"], dtype=object)


@dataclass(frozen=True)
class RuntimeInputs:
    """One array per config input, and whether they come from the warm-up sample or are random."""

    arrays: dict[str, np.ndarray]
    from_warmup: bool


def runtime_inputs(model_dir: Path, config: mc.ModelConfig, rows: int, seed: int = 0) -> RuntimeInputs:
    """Inputs for every config input; ``rows`` rows when the model batches, else the config's shape."""
    rng = np.random.default_rng(seed)
    sample = first_sample(config)
    batch_rows = rows if config.max_batch_size > 0 else None
    arrays = {}
    for entry in config.input:
        spec = sample.inputs[entry.name] if sample is not None and entry.name in sample.inputs else None
        datatype = datatypes.from_config_type(entry.data_type)
        arrays[entry.name] = _input_array(model_dir, spec, datatype, list(entry.dims), batch_rows, rng)
    if config.HasField("sequence_batching"):
        arrays.update(_sequence_start(config, batch_rows))
    return RuntimeInputs(arrays, from_warmup=sample is not None)


def _sequence_start(config: mc.ModelConfig, batch_rows: int | None) -> dict[str, np.ndarray]:
    """The tensors the sequence batcher adds, as for the first request of a sequence in every row."""
    settings = SequenceSettings.from_config(config)
    row = settings.row_inputs({}, 1, start=True, end=False, state=settings.initial_state())
    if batch_rows is None:
        return row
    return {name: np.concatenate([array] * batch_rows) for name, array in row.items()}


def _input_array(
    model_dir: Path,
    spec: WarmupInput | None,
    datatype: Datatype,
    dims: list[int],
    batch_rows: int | None,
    rng: np.random.Generator,
) -> np.ndarray:
    batch = (batch_rows,) if batch_rows is not None else ()
    source = spec.WhichOneof("input_data_type") if spec is not None else None
    if spec is None or source == "random_data":
        shape = (
            tuple(spec.dims) if spec is not None else tuple(VARIABLE_DIM_SIZE if d < 0 else d for d in dims)
        )
        return random_array(datatype, batch + shape, rng)
    if source == "input_data_file":
        one = read_warmup_file(model_dir, spec)
    else:
        one = datatypes.zeros(datatype, tuple(spec.dims))
    if batch_rows is None:
        return one
    return np.stack([one] + [_vary(one, rng) for _ in range(batch_rows - 1)])


def random_array(datatype: Datatype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Seeded data of ``datatype`` in a range most models accept (see the module docstring)."""
    kind = datatype.numpy.kind
    if datatype.name == "BYTES":
        return rng.choice(_STRINGS, size=shape)
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if kind in "iu":
        return rng.integers(0, 4, size=shape).astype(datatype.numpy)
    return rng.standard_normal(size=shape).astype(datatype.numpy)


def _vary(row: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if row.dtype.kind != "f":
        return row.copy()
    noise = rng.standard_normal(size=row.shape) * 0.1 * (np.abs(row) + 1)
    return (row + noise).astype(row.dtype)
