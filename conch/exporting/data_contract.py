"""``contract.yaml`` for an exported scikit-learn or boosted-trees model (:mod:`conch.core.contracts`).

What goes in, per model input:

- its datatype, from the exported graph's signature;
- how a missing value is treated: ``impute`` where the pipeline treats it (:mod:`column_treatments`),
  else ``default``, with the median (numbers) or the most frequent value (integers, text, booleans) of
  the reference frame, or of the sample without one; a column with no value at all is ``required``;
- the categories its encoder learned, refused when unknown only where the encoder refuses them;
- with a reference frame, the range each numeric one-column input took there. Without one no range is
  recorded, and ``conch validate`` says so.

An input of several columns (a model fitted on an array) gets its type and missing treatment only: a
range or a category belongs to one column. ONNX graphs and torch modules get no contract, as nothing
says what their inputs mean; write one by hand.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.contracts import (
    CONTRACT_FILENAME,
    TABLE_TYPES,
    Contract,
    FieldContract,
    contract_document,
    parse_contract,
)
from conch.exporting.column_treatments import ColumnTreatment, column_treatments
from conch.exporting.conversion import Conversion
from conch.exporting.samples import SINGLE_INPUT, frame_columns, is_data_frame, is_missing

log = logging.getLogger(__name__)

#: Frameworks whose inputs are a notebook's columns, which a contract can describe.
TABULAR_FRAMEWORKS_EXCLUDED = ("torch", "onnx")
_HEADER = (
    "# The data contract of this model version: a Frictionless Table Schema with conch's own keys under\n"
    "# 'conch'. conch serve holds every request to it; edit it by hand (docs/contracts.md), then run\n"
    "# conch validate. conch package records its checksum.\n"
)


def write_contract(
    version_dir: Path, model: Any, conversion: Conversion, config: mc.ModelConfig, reference: Any
) -> Contract | None:
    """Write ``contract.yaml`` for ``model`` into ``version_dir``; None (nothing written) for a model
    whose inputs are not a notebook's columns."""
    if conversion.framework.get("name") in TABULAR_FRAMEWORKS_EXCLUDED:
        return None
    tensors = {tensor: column for column, tensor in conversion.column_inputs.items()}
    single = list(conversion.inputs) == [SINGLE_INPUT] and len(conversion.inputs[SINGLE_INPUT].shape) == 2
    original: list[Any] = (
        list(range(conversion.inputs[SINGLE_INPUT].shape[1]))
        if single
        else [tensors.get(name, name) for name in conversion.inputs]
    )
    treatments = column_treatments(model, original)
    measured = _reference_columns(reference, conversion, tensors) if reference is not None else None
    fields = {}
    for entry in config.input:
        datatype = datatypes.from_config_type(entry.data_type).name
        if single:  # one value cannot be every column's default: a missing one is refused
            treatment, observed, seen = _all_columns(list(treatments.values())), None, None
        else:
            treatment = treatments[tensors.get(entry.name, entry.name)]
            observed = measured.get(entry.name) if measured is not None else None
            seen = observed if observed is not None else conversion.inputs.get(entry.name)
        fields[entry.name] = _field(entry.name, datatype, treatment, seen, observed, tensors.get(entry.name))
    contract = Contract(fields, range_source="reference" if measured is not None else "none")
    text = _HEADER + yaml.safe_dump(contract_document(contract), sort_keys=False, allow_unicode=True)
    parse_contract(yaml.safe_load(text))  # what the server reads must be what was meant
    (version_dir / CONTRACT_FILENAME).write_text(text, encoding="utf-8")
    log.info(
        "wrote %s: %d inputs, %s",
        CONTRACT_FILENAME,
        len(fields),
        "training ranges from the reference" if measured is not None else "no training range (no reference)",
    )
    return contract


def _field(
    name: str,
    datatype: str,
    treatment: ColumnTreatment,
    seen: np.ndarray | None,
    observed: np.ndarray | None,
    title: str | None,
) -> FieldContract:
    kind = TABLE_TYPES[datatype[:2]]
    holds_missing = datatype.startswith("FP") or datatype == "BYTES"
    default = None
    if treatment.imputes and holds_missing:
        missing = "impute"
    else:
        default = _default(seen, kind)
        missing = "refuse" if default is None else "default"
    categories = None
    if treatment.categories:
        categories = tuple(_typed(value, kind) for value in treatment.categories)
    minimum = maximum = None
    if observed is not None and kind in ("number", "integer") and observed.size:
        values = observed.astype(np.float64)
        if not np.isnan(values).all():
            minimum, maximum = float(np.nanmin(values)), float(np.nanmax(values))
    return FieldContract(
        name=name,
        datatype=datatype,
        missing=missing,
        default=default,
        categories=categories,
        unknown_category="refuse" if treatment.refuses_unknown else "count",
        minimum=minimum,
        maximum=maximum,
        title=title,
    )


def _all_columns(treatments: list[ColumnTreatment]) -> ColumnTreatment:
    """One input holding every column: it imputes only if each of its columns does."""
    return ColumnTreatment(imputes=bool(treatments) and all(t.imputes for t in treatments))


def _default(values: np.ndarray | None, kind: str) -> Any:
    """The median of numbers, the most frequent integer, text or boolean; None when none is given."""
    if values is None or not values.size:
        return None
    flat = [value for value in np.asarray(values, dtype=object).ravel().tolist() if not is_missing(value)]
    flat = [value for value in flat if value not in ("", b"")]
    if not flat:
        return None
    if kind == "number":
        return float(np.median(np.asarray(flat, dtype=np.float64)))
    most_frequent = Counter(_typed(value, kind) for value in flat).most_common(1)[0][0]
    return most_frequent


def _typed(value: Any, kind: str) -> Any:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, np.generic):
        value = value.item()
    if kind == "number":
        return float(value)
    if kind == "integer":
        return int(value)
    if kind == "boolean":
        return bool(value)
    return str(value)


def _reference_columns(
    reference: Any, conversion: Conversion, tensors: Mapping[str, str]
) -> dict[str, np.ndarray] | None:
    """The reference's values by input name; None for an array reference of a one-input model."""
    from conch.validation.expected_agreement import loaded_reference

    loaded = loaded_reference(reference)
    if isinstance(loaded, Mapping):
        columns = {str(name): np.asarray(values) for name, values in loaded.items()}
    elif is_data_frame(loaded):
        columns = frame_columns(loaded)
    else:
        return None
    by_tensor = {tensor: column for tensor, column in tensors.items()}
    return {
        name: columns[by_tensor.get(name, name)]
        for name in conversion.inputs
        if by_tensor.get(name, name) in columns
    }
