"""The warm-up entry of an exported config, written from the sample's first row.

A real row, not zeros, because a pipeline's first call on real data is what warm-up should pay for
(string lookups, branches that zeros never take). One file per input under ``<model>/warmup/``, in
the layout Triton and ``conch.repository.warmup`` read: the raw little-endian bytes of one sample,
BYTES elements each prefixed by a 4-byte little-endian length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import codecs
from conch.repository.warmup import WARMUP_FOLDER

WARMUP_SAMPLE = "export_sample"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def add_warmup(config: mc.ModelConfig, feeds: Mapping[str, np.ndarray], model_dir: Path) -> None:
    """Write one warm-up file per input into ``model_dir/warmup`` and the entry that reads them."""
    batching = config.max_batch_size > 0
    folder = model_dir / WARMUP_FOLDER
    folder.mkdir(exist_ok=True)
    entry = config.model_warmup.add(name=WARMUP_SAMPLE, batch_size=1)
    used: set[str] = set()
    for index, spec in enumerate(config.input):
        one = feeds[spec.name][:1] if batching else feeds[spec.name]
        file_name = _file_name(spec.name, index, used)
        (folder / file_name).write_bytes(bytes(codecs.to_bytes(one)))
        warm = entry.inputs[spec.name]
        warm.data_type = spec.data_type
        if spec.HasField("reshape"):
            warm.dims.extend(spec.dims)
        else:
            warm.dims.extend(one.shape[1:] if batching else one.shape)
        warm.input_data_file = file_name


def _file_name(input_name: str, index: int, used: set[str]) -> str:
    # The input's name when it makes a plain file name; column names may hold anything.
    name = _UNSAFE.sub("_", input_name)
    if name.strip(".") == "" or name in used:
        name = f"input_{index}"
    used.add(name)
    return name
