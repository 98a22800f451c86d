"""``optimize_int8(model_dir, ...)``: an fp32 ONNX version in, its int8 twin beside it, or a refusal.

The steps: read the model and its fp32 version (``source``), quantize it into a hidden staging
folder (``quantization``), compare the two on the same rows (``comparison``), and only when the
figures pass, record the twin (``twin_record``) and move the version folder and the config into the
model folder by renames (``conch.exporting.staging``, as ``conch export`` does). A refusal or a
failure at any step leaves the model folder as it was.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from conch.exporting.staging import Staging
from conch.optimizing import DEFAULT_MIN_AGREEMENT
from conch.optimizing.comparison import Comparison, compare_versions
from conch.optimizing.quantization import Method, check_quantized, quantize
from conch.optimizing.source import OptimizeError, evaluation_rows, read_source
from conch.optimizing.twin_record import config_with_twin, write_records
from conch.packaging.metadata import CONFIG_FILENAME
from conch.repository.version_policy import next_version
from conch.repository.warmup import WARMUP_FOLDER

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Optimized:
    """What ``optimize_int8`` did: the model, its two versions, how, and what it measured."""

    model: str
    source_version: int
    twin_version: int
    method: Method
    rows_from: str
    comparison: Comparison

    @property
    def written(self) -> bool:
        return self.comparison.passed


def optimize_int8(
    model_dir: Path,
    *,
    calibration: Path | None = None,
    min_agreement: float = DEFAULT_MIN_AGREEMENT,
    version: int | None = None,
    from_version: int | None = None,
    progress: Callable[[str], None] = log.info,
) -> Optimized:
    """Quantize ``model_dir``'s fp32 version to int8 as version ``version`` (default: the next one).

    Returns the figures whether or not the twin was written (``written`` says); raises
    :class:`OptimizeError` when it cannot get that far. Static quantization with ``calibration``
    rows, dynamic without.
    """
    source = read_source(model_dir, from_version)
    number = _twin_number(model_dir, version)
    progress(f"reading the rows to compare on ({'calibration file' if calibration else 'warm-up sample'})")
    rows = evaluation_rows(source, calibration)
    batch_rows = min(source.config.max_batch_size, len(next(iter(rows.values())))) or None
    staging = Staging(model_dir.parent, model_dir.name, number)
    try:
        staged_file = staging.version_dir / source.model_file.name
        progress(f"quantizing version {source.version} ({'static' if calibration else 'dynamic'} int8)")
        try:
            method = quantize(
                source.model_file, staged_file, rows if calibration else None, batch_rows, staging.root
            )
        except Exception as exc:  # the quantizer raises whatever the graph's operators make it raise
            raise OptimizeError(f"ONNX Runtime could not quantize version {source.version}: {exc}") from None
        check_quantized(staged_file)
        progress(f"comparing version {number} (int8) with version {source.version} (fp32)")
        comparison = compare_versions(source.config, source.model_file, staged_file, rows, min_agreement)
        optimized = Optimized(
            source.config.name, source.version, number, method, _rows_from(calibration), comparison
        )
        if comparison.passed:
            _place(source.config_text, optimized, staging, source.version_dir)
    finally:
        staging.discard()
    return optimized


def _twin_number(model_dir: Path, version: int | None) -> int:
    following = next_version(model_dir)
    if version is None:
        return following
    if (model_dir / str(version)).exists():
        raise OptimizeError(
            f"version {version} of '{model_dir.name}' already exists; choose another --version, or leave "
            f"it out to write version {following}",
            usage=True,
        )
    return version


def _rows_from(calibration: Path | None) -> str:
    if calibration is not None:
        return f"calibration file {calibration.name}"
    return "the warm-up sample and rows varied from it, as conch validate runs"


def _place(config_text: str, optimized: Optimized, staging: Staging, source_dir: Path) -> None:
    """Write the records into the staged folder, then move the twin and the config into place."""
    model_dir = staging.model_dir
    text = config_with_twin(config_text, optimized.model, optimized.twin_version, optimized.source_version)
    (staging.root / CONFIG_FILENAME).write_text(text, encoding="utf-8")
    if (model_dir / WARMUP_FOLDER).is_dir():  # the config moves with its warm-up folder
        shutil.copytree(model_dir / WARMUP_FOLDER, staging.root / WARMUP_FOLDER)
    record = {
        "format": "conch.quantization/1",
        "quantized_twin_of": optimized.source_version,
        "method": optimized.method.value,
        "weights": "int8",
        "rows_from": optimized.rows_from,
        "onnxruntime": ort.__version__,
        "figures": optimized.comparison.as_json(),
    }
    write_records(staging.version_dir, source_dir, staging.root, record)
    staging.commit(model_files=True)
