"""What ``conch optimize`` starts from: the model folder, its config, the fp32 version and the rows.

The rows are what static quantization calibrates on and what both versions are compared on. A
``--calibration`` file is read like ``conch export``'s sample (``.npy`` for a model with one input,
``.npz`` with one array per input), in the graph's own shapes. Without one, the rows are those
``conch validate`` runs its checks on: the warm-up sample and rows varied from it (or seeded random
data when the config has no warm-up), :data:`GENERATED_ROWS` of them for a batching model.

Every problem found here is the caller's to fix (a path that is no model, no ONNX version, a bad
file), so it is an :class:`OptimizeError` with ``usage`` set: ``conch optimize`` exits 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import BackendKind, backend_kind, infer_backend
from conch.backends.onnxruntime import open_session, read_signature
from conch.backends.signature import ModelSignature
from conch.core.contracts import CONTRACT_FILENAME
from conch.core.errors import ConchError
from conch.exporting.errors import ExportError
from conch.exporting.samples import graph_feeds, read_sample_file
from conch.packaging.metadata import CONFIG_FILENAME
from conch.repository import autocomplete, config_validation
from conch.repository.config import fields_set_in_text, parse_config
from conch.repository.version_policy import version_folders
from conch.validation.inputs import runtime_inputs

#: Rows compared (and calibrated on) when no ``--calibration`` file is given.
GENERATED_ROWS = 256
#: Written into a twin's version folder: how it was made and what it was measured at.
QUANTIZATION_RECORD = "quantization.json"


def is_model_file(path: Path, graph: Path | None = None) -> bool:
    """Whether ``path`` in a version folder is part of the model (the graph, external weights), not a
    record conch writes beside it (``metadata.json`` and other JSON, the classes' ``*_labels.txt``,
    the data contract)."""
    return (
        path.is_file()
        and path != graph
        and path.suffix != ".json"
        and path.name != CONTRACT_FILENAME
        and not path.name.endswith("_labels.txt")
    )


class OptimizeError(Exception):
    """``conch optimize`` cannot go on; ``usage``: the input is wrong (exit 2), else a failure (exit 1).

    Nothing has been written to the model folder when this is raised.
    """

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class SourceModel:
    """The model folder as read: its config text ("" without one), completed config and fp32 version."""

    model_dir: Path
    config_text: str
    config: mc.ModelConfig
    version: int
    model_file: Path
    signature: ModelSignature

    @property
    def version_dir(self) -> Path:
        return self.model_file.parent


def read_source(model_dir: Path, from_version: int | None) -> SourceModel:
    """The model in ``model_dir`` and its fp32 ONNX version (``from_version``, or the newest one)."""
    if not model_dir.is_dir():
        raise OptimizeError(
            f"'{model_dir}' is not a model folder (a folder of <version>/model.onnx)", usage=True
        )
    text, config = _config(model_dir)
    if backend_kind(config) is not BackendKind.ONNX:
        raise OptimizeError(
            f"model '{config.name}' runs on the {backend_kind(config).value} backend; conch optimize "
            "--int8 quantizes ONNX models (export the model to ONNX first: conch export)",
            usage=True,
        )
    number = _source_version(model_dir, config.default_model_filename, from_version)
    model_file = model_dir / str(number) / config.default_model_filename
    try:
        session = open_session(model_file, config)
        signature = read_signature(session)
        autocomplete.complete_from_signature(config, signature, fields_set_in_text(config, text))
        config_validation.check_against_signature(config, signature)
    except ConchError as exc:
        message = f"version {number} of '{config.name}' cannot be loaded: {exc.message}"
        raise OptimizeError(message, usage=True) from None
    return SourceModel(model_dir, text, config, number, model_file, signature)


def _config(model_dir: Path) -> tuple[str, mc.ModelConfig]:
    path = model_dir / CONFIG_FILENAME
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    try:
        config = parse_config(text)
        infer_backend(config, model_dir)
        autocomplete.complete_defaults(config, model_dir.name)
        config_validation.check_identity(config, model_dir.name)
    except ConchError as exc:
        raise OptimizeError(f"'{path}': {exc.message}", usage=True) from None
    return text, config


def _source_version(model_dir: Path, filename: str, wanted: int | None) -> int:
    """``wanted``, or the newest version folder holding an ONNX file that is not itself a twin."""
    numbers = [n for n in version_folders(model_dir) if (model_dir / str(n) / filename).is_file()]
    if wanted is not None:
        if wanted not in numbers:
            raise OptimizeError(
                f"'{model_dir}' has no version {wanted} with {filename}; its ONNX versions are "
                f"{numbers or 'none'}",
                usage=True,
            )
        if (model_dir / str(wanted) / QUANTIZATION_RECORD).is_file():
            raise OptimizeError(
                f"version {wanted} of '{model_dir.name}' is already an int8 twin; quantize the fp32 "
                "version it was made from",
                usage=True,
            )
        return wanted
    fp32 = [n for n in numbers if not (model_dir / str(n) / QUANTIZATION_RECORD).is_file()]
    if not fp32:
        raise OptimizeError(
            f"'{model_dir}' has no fp32 ONNX version to quantize (a numeric folder holding {filename}); "
            "export one first with conch export",
            usage=True,
        )
    return fp32[-1]


def evaluation_rows(source: SourceModel, calibration: Path | None) -> dict[str, np.ndarray]:
    """The rows both versions are compared on, as graph feeds (see the module's docstring)."""
    try:
        if calibration is not None:
            return graph_feeds(source.signature, _named(source, read_sample_file(calibration)))
        inputs = runtime_inputs(source.model_dir, source.config, rows=GENERATED_ROWS)
        return graph_feeds(source.signature, _graph_shaped(source.config, inputs.arrays))
    except ExportError as exc:
        where = f"calibration file '{calibration}'" if calibration is not None else "the warm-up sample"
        raise OptimizeError(f"{where}: {exc}", usage=True) from None


def _named(source: SourceModel, sample: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(sample, dict):
        return sample
    names = [tensor.name for tensor in source.signature.inputs]
    if len(names) != 1:
        raise ExportError(
            f"a .npy file holds one array, and the model has {len(names)} inputs {names}; save an .npz "
            "with one array per input (numpy.savez(path, **arrays))"
        )
    return {names[0]: sample}


def _graph_shaped(config: mc.ModelConfig, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Client-shaped arrays (the config's dims) in the graph's shapes, where the config reshapes."""
    batching = config.max_batch_size > 0
    shaped = dict(arrays)
    for entry in config.input:
        if entry.HasField("reshape") and entry.name in shaped:
            array = shaped[entry.name]
            target = tuple(entry.reshape.shape)
            shaped[entry.name] = array.reshape(array.shape[:1] + target if batching else target)
    return shaped
