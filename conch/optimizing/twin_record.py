"""Where a quantized twin is recorded: the config's ``parameters`` and the twin's own version folder.

- ``config.pbtxt`` gets ``quantized_twin`` and ``quantized_twin_of`` (and ``prefer_quantized:
  "no_gpu"`` unless it already says something), which the server reads
  (:mod:`conch.repository.quantized_twin`) and ``GET /v2/models/{m}/config`` shows to clients. The
  entries are appended to the operator's file, comments and layout kept; a config that already
  names a twin is rewritten from its parsed form, since text cannot be edited in place safely.
- ``<twin>/quantization.json`` says how the twin was made and what it was measured at.
- ``<twin>/contract.yaml``, a copy of the fp32 version's data contract: the twin takes the same
  inputs, so a request routed to it is checked the same way.
- ``<twin>/metadata.json``, when the fp32 version has one (``conch export`` wrote it): the same
  description with the twin's number, files and checksums, and the quantization under ``extra``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from conch.core.contracts import CONTRACT_FILENAME
from conch.optimizing.source import QUANTIZATION_RECORD
from conch.packaging.metadata import (
    MetadataError,
    model_file_checksums,
    read_metadata,
    version_file_checksums,
    write_metadata,
)
from conch.repository.config import parse_config
from conch.repository.quantized_twin import (
    DEFAULT_PREFERENCE,
    PREFERENCE_PARAMETER,
    SOURCE_PARAMETER,
    TWIN_PARAMETER,
)

QUANTIZATION_KEY = "quantization"


def config_with_twin(text: str, model: str, twin: int, source: int) -> str:
    """``config.pbtxt``'s text (``""``: the model has none) naming ``twin`` as the int8 twin of ``source``."""
    config = parse_config(text)
    wanted = {TWIN_PARAMETER: str(twin), SOURCE_PARAMETER: str(source)}
    if PREFERENCE_PARAMETER not in config.parameters:
        wanted[PREFERENCE_PARAMETER] = DEFAULT_PREFERENCE
    if not text.strip():
        text = f'name: "{model}"\nbackend: "onnxruntime"\n'
    if TWIN_PARAMETER in config.parameters or SOURCE_PARAMETER in config.parameters:
        for key, value in wanted.items():
            config.parameters[key].string_value = value
        return text_format.MessageToString(config)
    block = "".join(
        f'parameters {{\n  key: "{key}"\n  value {{ string_value: "{value}" }}\n}}\n'
        for key, value in wanted.items()
    )
    return f"{text.rstrip()}\n# The int8 twin, written by conch optimize (see conch docs edge).\n{block}"


def write_records(
    version_dir: Path, source_dir: Path, staged_model_dir: Path, record: dict[str, Any]
) -> None:
    """``quantization.json`` and, when the source version has one, ``metadata.json`` in ``version_dir``.

    ``staged_model_dir`` holds the config and warm-up the twin is placed with, for the checksums.
    """
    (version_dir / QUANTIZATION_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if (source_dir / CONTRACT_FILENAME).is_file():
        shutil.copy2(source_dir / CONTRACT_FILENAME, version_dir / CONTRACT_FILENAME)
    try:
        source = read_metadata(source_dir)
    except MetadataError:
        return  # a hand-placed ONNX file: nothing to carry over
    metadata = replace(
        source,
        version=int(version_dir.name),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        package_version=None,
        extra={**source.extra, QUANTIZATION_KEY: record},
        files=version_file_checksums(version_dir),
        model_files=model_file_checksums(staged_model_dir),
    )
    write_metadata(version_dir, metadata)
