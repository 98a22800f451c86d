"""How often a new version predicts what the version before it did, measured on a reference frame before
its release, and recorded in its ``metadata.json`` for the release gate.

The comparison is the gate's own (:func:`conch.release.compare.compare_outputs`: the argmax of class
scores, equal labels, regression values within float32's tolerance), one reference row taken as one
request, with both versions run by ONNX Runtime as ``conch serve`` runs them
(:func:`conch.optimizing.comparison.compare_versions`). The interval is Wilson's 95% score interval: one
measurement on a fixed set of rows, so no sequential correction is needed. The version compared
against is the last promoted one when the release store names one, else the highest other version
folder that no release rejected. The candidate is also run against itself, which gives its prediction
noise (``self_agreement``, 1 for a deterministic model).

Only ONNX versions and exported text classifiers are compared (the latter by their served runner,
:func:`conch.validation.text_agreement.measure_text_versions`): any other Python-backend model may
compute anything, and re-running it is not free, so it gets no figure and its gate uses the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from conch.exporting.errors import ExportError
from conch.exporting.samples import frame_columns, graph_feeds, is_data_frame, read_sample_file
from conch.optimizing.comparison import compare_versions
from conch.optimizing.source import OptimizeError, SourceModel, read_source
from conch.packaging.metadata import read_metadata, write_metadata
from conch.release.expected_agreement import METADATA_KEY, ExpectedAgreement
from conch.repository.version_policy import version_folders
from conch.validation.agreement_interval import MIN_REFERENCE_ROWS, ReferenceError, wilson_interval


def against_version(model_dir: Path, candidate: int, rejected: set[int], promoted: int | None) -> int | None:
    """The version the candidate is compared with: ``promoted`` when it is another folder that is not
    rejected, else the highest other version folder not rejected; None when there is none."""
    others = [n for n in version_folders(model_dir) if n != candidate and n not in rejected]
    if promoted is not None and promoted in others:
        return promoted
    return others[-1] if others else None


def record_expected_agreement(
    model_dir: Path, candidate: int, reference: Any, store: str | None = None
) -> ExpectedAgreement | None:
    """Measure ``candidate`` against the version before it on ``reference`` and record it in its
    ``metadata.json``; None (nothing recorded) when there is no other version to compare with.

    The rejected versions and the last promoted one come from the release store (``store``, else
    ``CONCH_RELEASE_STORE``, else the repository's own); an unreadable store is an error, since a
    figure measured against a rejected version would set the gate's limit from a bad model.
    """
    from conch.release.verdict_store import VerdictStore, VerdictStoreError
    from conch.release.verdicts import ModelVerdicts, fold
    from conch.validation.rejections import store_location

    location = store_location(model_dir.parent, store)
    verdicts = ModelVerdicts()
    if location is not None:
        try:
            verdicts = fold(VerdictStore(location).read()).get(model_dir.name) or ModelVerdicts()
        except VerdictStoreError as exc:
            raise ReferenceError(f"cannot read the release store to find the version before: {exc}") from None
    against = against_version(model_dir, candidate, set(verdicts.rejected), verdicts.promoted)
    if against is None:
        return None
    expected = measure(model_dir, candidate, against, reference)
    record(model_dir / str(candidate), expected)
    return expected


def measure(model_dir: Path, candidate: int, against: int, reference: Any) -> ExpectedAgreement:
    """Agreement of ``candidate`` with ``against`` on ``reference`` (a DataFrame, an array, a mapping
    of input name to array, or a ``.csv``, ``.parquet``, ``.npy`` or ``.npz`` file)."""
    from conch.validation import text_agreement

    if text_agreement.is_exported_text_classifier(model_dir / str(candidate)):
        return text_agreement.measure_text_versions(
            model_dir, candidate, against, loaded_reference(reference)
        )
    try:
        new, old = read_source(model_dir, candidate), read_source(model_dir, against)
    except OptimizeError as exc:
        raise ReferenceError(f"cannot compare versions {candidate} and {against}: {exc}") from None
    rows = reference_feeds(new, reference)
    count = len(next(iter(rows.values())))
    if count < MIN_REFERENCE_ROWS:
        raise ReferenceError(
            f"the reference has {count} rows; give at least {MIN_REFERENCE_ROWS} (a few hundred rows of "
            "real traffic), or the interval is wider than the gate's margin"
        )
    other = compare_versions(new.config, old.model_file, new.model_file, rows, min_agreement=0.0)
    itself = compare_versions(new.config, new.model_file, new.model_file, rows, min_agreement=0.0)
    agreeing = round(other.agreement * other.compared)
    lower, upper = wilson_interval(agreeing, other.compared)
    return ExpectedAgreement(other.agreement, lower, upper, other.compared, against, itself.agreement)


def record(version_dir: Path, expected: ExpectedAgreement) -> None:
    """Write ``expected`` into the version's ``metadata.json`` (its ``extra`` map)."""
    metadata = read_metadata(version_dir)
    metadata.extra[METADATA_KEY] = expected.to_json()
    write_metadata(version_dir, metadata)


def reference_feeds(source: SourceModel, reference: Any) -> dict[str, np.ndarray]:
    """The reference as the graph's inputs: a frame's columns by input name (through the version's
    ``column_inputs``), or all its columns side by side for a model with one input."""
    try:
        arrays = _arrays(source, loaded_reference(reference))
        return graph_feeds(source.signature, arrays)
    except ExportError as exc:
        raise ReferenceError(f"the reference does not fit version {source.version}: {exc}") from None


def loaded_reference(reference: Any) -> Any:
    """``reference`` itself, or the frame or arrays read from its .csv, .parquet, .npy or .npz file."""
    if not isinstance(reference, str | Path):
        return reference
    path = Path(reference)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise ReferenceError(f"reference file '{path}' does not exist")
    if suffix in (".npy", ".npz"):
        return read_sample_file(path)
    if suffix not in (".csv", ".parquet"):
        raise ReferenceError(f"reference '{path}' must be .csv, .parquet, .npy or .npz")
    try:
        import pandas
    except ImportError:
        raise ReferenceError("a .csv or .parquet reference needs pandas: pip install pandas") from None
    try:
        return pandas.read_csv(path) if suffix == ".csv" else pandas.read_parquet(path)
    except (OSError, ValueError, ImportError) as exc:
        raise ReferenceError(f"cannot read reference '{path}': {exc}") from None


def _arrays(source: SourceModel, reference: Any) -> dict[str, np.ndarray]:
    names = [tensor.name for tensor in source.signature.inputs]
    if isinstance(reference, Mapping):
        return {str(name): np.asarray(values) for name, values in reference.items()}
    if not is_data_frame(reference):
        if len(names) != 1:
            raise ReferenceError(f"an array feeds one input, and the model has {len(names)}: {names}")
        values = np.asarray(reference)
        # A text pipeline's reference is its text, as it was fitted: a list or a Series, one column.
        return {names[0]: values.reshape(-1, 1) if values.ndim == 1 else values}
    metadata = read_metadata(source.version_dir)
    columns = frame_columns(reference)
    renamed = {metadata.column_inputs.get(column, column): values for column, values in columns.items()}
    if all(name in renamed for name in names):
        return {name: renamed[name] for name in names}
    if len(names) != 1:
        missing = sorted(set(names) - set(renamed))
        raise ReferenceError(f"the reference has no column for the model's inputs {missing}")
    order = metadata.feature_names or list(columns)
    absent = [name for name in order if name not in columns]
    if absent:
        raise ReferenceError(f"the reference lacks the model's feature columns {absent}")
    return {names[0]: np.hstack([columns[name] for name in order])}
