"""``export(model, sample, ...)``: a notebook model in, a validated, versioned model folder out.

The steps, each in its own module: convert with the framework's exporter (``conversion``), write the
ONNX file aside (``staging``), run it with ONNX Runtime on the sample and compare with the original
(``agreement``), decide the config (``model_config``) and its warm-up (``warmup_files``), record
``metadata.json``, then move everything into the repository. Any failure before the move leaves the
repository as it was.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import OnnxRuntimeInstance, open_session, read_signature
from conch.backends.signature import ModelSignature
from conch.core.errors import ConchError
from conch.core.input_aliases import COLUMN_INPUTS_PARAMETER
from conch.core.types import ExecutionTiming
from conch.exporting.agreement import check_agreement
from conch.exporting.class_labels import name_labels, write_labels
from conch.exporting.column_names import column_inputs_json
from conch.exporting.conversion import Conversion
from conch.exporting.converters import convert
from conch.exporting.errors import ConfigRewrittenWarning, ExportError
from conch.exporting.model_config import ConfigPlan, config_text, plan_config
from conch.exporting.samples import graph_feeds
from conch.exporting.staging import Staging
from conch.exporting.text_classifier import export_text_classifier, is_text_classifier
from conch.exporting.warmup_files import add_warmup
from conch.packaging.archive import PackageError, check_model_name
from conch.packaging.metadata import (
    CONFIG_FILENAME,
    ModelMetadata,
    TensorSchema,
    model_file_checksums,
    version_file_checksums,
    write_metadata,
)
from conch.repository.autocomplete import DEFAULT_MODEL_FILENAME
from conch.repository.config import tensor_metadata
from conch.repository.version_policy import next_version, version_folders
from conch.validation.load_hints import missing_locale, not_loadable_hint

log = logging.getLogger(__name__)

#: Batches form only when requests queue, so a roomy maximum costs nothing at low load; lower it for
#: models whose batches of 32 would not fit in memory or latency budgets.
DEFAULT_MAX_BATCH_SIZE = 32


def export(
    model: Any,
    sample: Any,
    *,
    repository: str | os.PathLike[str],
    name: str,
    version: int | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    metadata: Mapping[str, Any] | None = None,
    reference: Any = None,
) -> Path:
    """Export ``model`` to ``<repository>/<name>/<version>/`` and return that folder.

    ``model`` is a fitted scikit-learn estimator or pipeline (XGBoost, LightGBM and CatBoost models
    included), a torch ``nn.Module``, a transformers text-classification pipeline, an
    ``onnx.ModelProto`` or a ``.onnx`` path; ``sample`` is a few real rows (DataFrame, 2-D array,
    tensor, a mapping of input name to array, or for a text classifier a few texts). ``version``
    defaults to the highest existing one plus one. ``metadata`` may hold ``training_data_version``;
    the rest is kept in ``metadata.json``'s ``extra``. Raises :class:`ExportError` (nothing written)
    when the model cannot be exported or its ONNX form disagrees with it on the sample.

    ``reference``, a few hundred real rows (a DataFrame, an array, or a .csv/.parquet/.npy/.npz path),
    measures how often the new version agrees with the version before it and records it for the
    release gate (:mod:`conch.validation.expected_agreement`).
    """
    _check_arguments(name, version, max_batch_size)
    described = _split_metadata(metadata)
    repository = Path(repository)
    model_dir = repository / name
    number = _version_number(model_dir, version)
    if is_text_classifier(model):
        export_text_classifier(model, sample, model_dir, number, max_batch_size, described)
        if reference is not None:
            _record_expected_agreement(model_dir, number, reference)
        return model_dir / str(number)
    log.info("converting %s to ONNX", type(model).__name__)
    conversion = convert(model, sample)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Staging(repository, name, number)
    try:
        signature, feeds = _check_on_sample(conversion, staging.version_dir / DEFAULT_MODEL_FILENAME)
        plan = plan_config(model_dir, name, signature, max_batch_size)
        if plan.write and conversion.column_inputs:
            _record_column_inputs(plan.config, conversion.column_inputs)
        write_labels(staging.version_dir, conversion.classes)
        if not model_dir.exists():
            write_labels(staging.root, conversion.classes)  # where Triton looks: see class_labels
        name_labels(plan.config, conversion.classes, plan.write)
        _write_contract(staging.version_dir, model, conversion, plan.config, reference)
        _report_config(plan, model_dir)
        if plan.write:
            add_warmup(plan.config, feeds, staging.root)
            (staging.root / CONFIG_FILENAME).write_text(config_text(plan.config), encoding="utf-8")
        model_files_dir = staging.root if plan.write else model_dir
        write_metadata(
            staging.version_dir,
            _version_metadata(conversion, plan.config, staging.version_dir, model_files_dir, described),
        )
        staging.commit(model_files=plan.write)
    finally:
        staging.discard()
    log.info("exported '%s' version %d to %s", name, number, model_dir / str(number))
    if reference is not None:
        _record_expected_agreement(model_dir, number, reference)
    return model_dir / str(number)


def _record_expected_agreement(model_dir: Path, number: int, reference: Any) -> None:
    from conch.validation.agreement_interval import ReferenceError
    from conch.validation.expected_agreement import record_expected_agreement

    log.info("comparing version %d with the version before it on the reference rows", number)
    try:
        expected = record_expected_agreement(model_dir, number, reference)
    except ReferenceError as exc:
        raise ExportError(
            f"version {number} was exported, but its expected agreement was not recorded: {exc}; record it "
            f"with conch validate {model_dir} --reference FILE"
        ) from None
    if expected is not None:
        log.info(
            "expected agreement with version %d: %.4f [%.4f, %.4f] on %d rows",
            expected.against_version,
            expected.value,
            expected.lower,
            expected.upper,
            expected.rows,
        )


def _write_contract(
    version_dir: Path, model: Any, conversion: Conversion, config: mc.ModelConfig, reference: Any
) -> None:
    from conch.exporting.data_contract import write_contract
    from conch.validation.agreement_interval import ReferenceError

    try:
        write_contract(version_dir, model, conversion, config, reference)
    except ReferenceError as exc:
        raise ExportError(f"the data contract's training ranges were not recorded: {exc}") from None


def _check_arguments(name: str, version: int | None, max_batch_size: int) -> None:
    try:
        check_model_name(name)  # the rule `conch package` and `conch install` apply, checked up front
    except PackageError as exc:
        raise ExportError(str(exc)) from None
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ExportError(f"version must be a whole number of at least 1, got {version!r}")
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 0:
        raise ExportError(f"max_batch_size must be a whole number of at least 0, got {max_batch_size!r}")


def _split_metadata(metadata: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    extra = dict(metadata or {})
    training_data_version = extra.pop("training_data_version", None)
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as exc:
        raise ExportError(f"metadata must hold JSON values only: {exc}") from None
    return None if training_data_version is None else str(training_data_version), extra


def _version_number(model_dir: Path, version: int | None) -> int:
    if model_dir.parent.exists() and not model_dir.parent.is_dir():
        raise ExportError(f"repository '{model_dir.parent}' exists and is not a folder")
    if model_dir.exists() and not model_dir.is_dir():
        raise ExportError(f"'{model_dir}' exists and is not a model folder")
    following = next_version(model_dir)
    if version is None:
        return following
    if (model_dir / str(version)).exists():
        raise ExportError(
            f"version {version} of '{model_dir.name}' already exists in '{model_dir}'; choose another "
            f"version, or leave it out to export version {following}"
        )
    return version


def _check_on_sample(
    conversion: Conversion, model_file: Path
) -> tuple[ModelSignature, dict[str, np.ndarray]]:
    """Write the graph, run it with ONNX Runtime on the sample and compare with the original."""
    model_file.write_bytes(conversion.onnx_model.SerializeToString())
    no_config = mc.ModelConfig()
    try:
        session = open_session(model_file, no_config)
        signature = read_signature(session)
        feeds = graph_feeds(signature, conversion.inputs)
        names = [tensor.name for tensor in signature.outputs]
        log.info("running the ONNX model on the sample and comparing with the original")
        outputs = OnnxRuntimeInstance(session, no_config).run(feeds, names, ExecutionTiming())
    except ConchError as exc:
        advice = f"; {not_loadable_hint(exc.message)}" if missing_locale(exc.message) else ""
        raise ExportError(
            f"ONNX Runtime cannot run the exported model on the sample: {exc.message}{advice}"
        ) from None
    check_agreement(conversion.references, outputs, conversion.likely_causes)
    return signature, feeds


def _record_column_inputs(config: mc.ModelConfig, column_inputs: dict[str, str]) -> None:
    # A client reads it from /v2/models/{m}/config; the server accepts the columns' names with it.
    config.parameters[COLUMN_INPUTS_PARAMETER].string_value = column_inputs_json(column_inputs)
    log.info(
        "columns renamed to tensor names (kept in metadata.json and the config's parameters): %s",
        ", ".join(f"'{column}' -> '{name}'" for column, name in column_inputs.items()),
    )


def _report_config(plan: ConfigPlan, model_dir: Path) -> None:
    if plan.replaced_because is not None:
        older = version_folders(model_dir)
        warnings.warn(
            f"'{model_dir / CONFIG_FILENAME}' no longer fits the exported model ({plan.replaced_because}); "
            f"it was rewritten from the new graph, losing its tuning, and versions {older} were made "
            "for the old interface",
            ConfigRewrittenWarning,
            stacklevel=3,
        )
    elif not plan.write:
        log.info("kept %s: the model's inputs and outputs still fit it", model_dir / CONFIG_FILENAME)


def _version_metadata(
    conversion: Conversion,
    config: mc.ModelConfig,
    version_dir: Path,
    model_files_dir: Path,
    described: tuple[str | None, dict[str, Any]],
) -> ModelMetadata:
    training_data_version, extra = described
    batching = config.max_batch_size > 0
    return ModelMetadata(
        name=config.name,
        version=int(version_dir.name),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        framework=conversion.framework,
        libraries=conversion.libraries,
        inputs=_schema(config.input, batching),
        outputs=_schema(config.output, batching),
        feature_names=conversion.feature_names,
        column_inputs=conversion.column_inputs,
        classes=conversion.classes,
        training_data_version=training_data_version,
        extra=extra,
        files=version_file_checksums(version_dir),
        model_files=model_file_checksums(model_files_dir),
    )


def _schema(entries: Any, batching: bool) -> list[TensorSchema]:
    # What callers see, exactly as the server's model metadata shows it.
    return [TensorSchema(**tensor_metadata(entry, batching)) for entry in entries]
