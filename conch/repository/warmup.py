"""Model warm-up samples (``model_warmup`` in ``config.pbtxt``), read from the config and the model's
``warmup/`` folder; :mod:`conch.lifecycle.warmup` runs them on every instance before a version is READY.

Why: the first executions of an ONNX Runtime session allocate its arena and pick kernels, so without
warm-up the first callers after a (re)load pay for it. Triton's semantics:

- each ``ModelWarmup`` sample runs ``count`` times (at least once) on every instance;
- an input is ``zero_data`` (zeros; empty strings for BYTES), ``random_data`` or ``input_data_file``;
  the file name is relative to ``<model>/warmup/`` and holds the raw little-endian bytes of one sample
  (``dims``), BYTES elements each prefixed by a 4-byte little-endian length, as in the binary tensor
  extension. A shorter file fails; only the start of a longer one is read;
- for a batching model the sample is repeated ``batch_size`` times along a new first dimension; a
  sample with ``batch_size`` 0 is skipped;
- a sample that fails makes the version UNAVAILABLE, with the sample's name in the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import codecs, datatypes
from conch.core.errors import ConchError, InvalidArgumentError

WARMUP_FOLDER = "warmup"
#: Elements one warm-up input may have, its batch included (64 MiB of FP32). A sample only has to
#: reach the model's code paths; a config's dims and batch_size are numbers up to 2**63, and
#: generating them whole failed a load with MemoryError or held it for minutes (found by
#: tests/unit/repository/test_fuzz_config.py).
MAX_WARMUP_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class WarmupSample:
    """One ``model_warmup`` entry turned into arrays the model takes (batch dimension included)."""

    name: str
    inputs: dict[str, np.ndarray]
    count: int


def warmup_samples(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """Every ``model_warmup`` entry of ``config``, with its data read or generated (seeded).

    As Triton, an entry with ``batch_size`` 0 is skipped (``conch validate`` warns about it).
    """
    batching = config.max_batch_size > 0
    return [_sample(entry, batching, model_dir) for entry in config.model_warmup if entry.batch_size > 0]


def _sample(entry: mc.ModelWarmup, batching: bool, model_dir: Path) -> WarmupSample:
    rng = np.random.default_rng(0)
    inputs = {}
    for input_name, spec in sorted(entry.inputs.items()):
        where = f"warm-up sample '{entry.name}' input '{input_name}'"
        elements = math.prod(spec.dims) * (entry.batch_size if batching else 1)
        if elements > MAX_WARMUP_ELEMENTS:
            raise InvalidArgumentError(
                f"{where}: dims {list(spec.dims)} with batch_size {entry.batch_size} make {elements} "
                f"elements, more than the {MAX_WARMUP_ELEMENTS} a warm-up sample may have; warm up with "
                "a smaller sample"
            )
        one = _one_sample(where, spec, model_dir, rng)
        inputs[input_name] = np.repeat(one[np.newaxis], entry.batch_size, axis=0) if batching else one
    return WarmupSample(entry.name, inputs, entry.count)


def _one_sample(
    where: str, spec: mc.ModelWarmup.Input, model_dir: Path, rng: np.random.Generator
) -> np.ndarray:
    datatype = datatypes.from_config_type(spec.data_type)
    shape = tuple(spec.dims)
    if any(d < 1 for d in shape):
        raise InvalidArgumentError(f"{where}: dims {list(shape)} must be fixed sizes of 1 or more")
    source = spec.WhichOneof("input_data_type")
    if source is None:
        raise InvalidArgumentError(f"{where}: no data: set zero_data, random_data or input_data_file")
    if source == "input_data_file":
        try:
            return read_warmup_file(model_dir, spec)
        except ConchError as exc:
            raise InvalidArgumentError(f"{where}: {exc.message}") from None
    if source == "random_data" and datatype.name == "BYTES":
        return datatypes.object_array(
            [str(v).encode() for v in rng.integers(0, 100, size=math.prod(shape))], shape
        )
    if source == "random_data" and datatype.numpy.kind in "iuf":
        return rng.integers(0, 10, size=shape).astype(datatype.numpy)
    return datatypes.zeros(datatype, shape)


def warmup_file_path(model_dir: Path, name: str) -> Path | None:
    """The file ``name`` names inside ``<model>/warmup/``, or None when it is not a file there.

    Why one rule for the server and ``conch validate``: a config's ``input_data_file`` comes from
    whoever wrote the config, and ``..`` or an absolute path must never reach outside the folder.
    """
    if "\0" in name:  # no file has one; resolve() would raise ValueError (found by fuzzing)
        return None
    folder = (model_dir / WARMUP_FOLDER).resolve()
    path = (folder / name).resolve()
    return path if path.is_relative_to(folder) and path.is_file() else None


def read_warmup_file(model_dir: Path, spec: mc.ModelWarmup.Input) -> np.ndarray:
    """The sample an ``input_data_file`` holds, shaped by the warm-up ``dims``.

    As Triton: the file must hold at least one sample; only its start is read when it holds more.
    """
    path = warmup_file_path(model_dir, spec.input_data_file)
    if path is None:
        raise InvalidArgumentError(f"file '{spec.input_data_file}' is not in the model's warmup/ folder")
    datatype = datatypes.from_config_type(spec.data_type)
    shape = tuple(spec.dims)
    count = math.prod(shape)
    data = path.read_bytes()
    if datatype.name == "BYTES":
        elements = codecs.bytes_elements(spec.input_data_file, data)
        if len(elements) < count:
            raise InvalidArgumentError(
                f"file '{spec.input_data_file}' holds {len(elements)} BYTES elements; dims {list(shape)} "
                f"need {count}"
            )
        return datatypes.object_array(elements[:count], shape)
    needed = count * datatype.item_size
    if len(data) < needed:
        raise InvalidArgumentError(
            f"file '{spec.input_data_file}' has {len(data)} bytes; dims {list(shape)} of {datatype.name} "
            f"need {needed}"
        )
    little_endian = datatype.numpy.newbyteorder("<")
    return np.frombuffer(data, dtype=little_endian, count=count).astype(datatype.numpy).reshape(shape)
