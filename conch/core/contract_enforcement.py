"""Holding a request's inputs to its version's data contract, after the request checks.

The order, per field: an absent input is made whole (all missing); a missing value (absent, NaN in a
float, ``""`` in text) goes to the model as missing where the pipeline imputes, takes the contract's
default where it does not, and is refused where the field is required; a category the encoders never
saw is refused only where the fitted pipeline would refuse it, else counted; a value outside the
training range is counted, or refused where the contract says so. Refusals are
:class:`ContractViolation` (400) naming the field and the rule.

Everything is decided here, without a clock or a metric: :class:`ContractOutcome` says what was filled
and counted, and the server reports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from conch.core import datatypes
from conch.core.contracts import Contract, FieldContract
from conch.core.data_lineage import DATA_VERSION, INGESTION_TIMESTAMP, Lineage
from conch.core.errors import InvalidArgumentError

#: The answer parameter naming the fields that took their default.
FILLED_PARAMETER = "filled"


class ContractViolation(InvalidArgumentError):
    """A request refused by its data contract: ``field`` broke ``rule`` (type, required, category,
    range, data_version, ingestion_timestamp)."""

    def __init__(self, model: str, field_name: str, rule: str, detail: str, what: str = "input") -> None:
        super().__init__(
            f"{what} '{field_name}' of model '{model}' breaks its data contract, rule '{rule}': {detail}"
        )
        self.field = field_name
        self.rule = rule


@dataclass(slots=True)
class ContractOutcome:
    """What enforcing the contract did to one request: fields filled per row, values counted per field."""

    rows: int
    filled: dict[str, list[int]] = field(default_factory=dict)
    unknown_categories: dict[str, int] = field(default_factory=dict)
    out_of_range: dict[str, int] = field(default_factory=dict)

    def filled_parameter(self) -> str | None:
        """The ``filled`` answer parameter: names, comma-separated, for one row; a JSON list of each
        row's names for several; None when nothing was filled."""
        if not self.filled:
            return None
        if self.rows == 1:
            return ",".join(self.filled)
        per_row: list[list[str]] = [[] for _ in range(self.rows)]
        for name, rows in self.filled.items():
            for row in rows:
                per_row[row].append(name)
        return json.dumps(per_row, separators=(",", ":"))


def check_lineage(contract: Contract, lineage: Lineage | None, model: str) -> None:
    """Refuse a request without the ``data_version`` or ``ingestion_timestamp`` its contract requires."""
    for name, required in (
        (DATA_VERSION, contract.data_version_required),
        (INGESTION_TIMESTAMP, contract.ingestion_timestamp_required),
    ):
        given = (
            lineage is not None
            and (lineage.data_version if name == DATA_VERSION else lineage.ingested_at) is not None
        )
        if required and not given:
            raise ContractViolation(
                model,
                name,
                "required",
                f"the contract requires it; send it as the request parameter '{name}' or the header "
                f"'conch-{name.replace('_', '-')}'",
                what="parameter",
            )


def enforce(
    contract: Contract,
    inputs: dict[str, np.ndarray],
    shapes: Mapping[str, Sequence[int]],
    batching: bool,
    model: str,
) -> ContractOutcome:
    """Make ``inputs`` (checked by the request checks) whole and hold them to ``contract``, in place.

    ``shapes``: each input's config dims (-1 any size), for the inputs the contract completes.
    """
    rows = _rows(inputs, batching)
    outcome = ContractOutcome(rows)
    for name, rule in contract.fields.items():
        values = inputs.get(name)
        missing: np.ndarray | None
        if values is None:
            values = inputs[name] = _absent(rule, shapes[name], rows, batching, model)
            missing = np.ones(values.shape, dtype=bool)
        else:
            missing = _missing(rule, values)
        if missing is not None and missing.any():
            values = inputs[name] = _treat_missing(rule, values, missing, rows, outcome, model)
        if rule.categories is not None:
            _check_categories(rule, values, outcome, model)
        if rule.has_range:
            _check_range(rule, values, outcome, model)
    return outcome


def _rows(inputs: dict[str, np.ndarray], batching: bool) -> int:
    if not batching:
        return 1
    for values in inputs.values():
        return int(values.shape[0])
    return 1


def _absent(rule: FieldContract, dims: Sequence[int], rows: int, batching: bool, model: str) -> np.ndarray:
    if rule.required:
        raise ContractViolation(
            model,
            rule.name,
            "required",
            "the input is missing and the field is required; send a value for it",
        )
    shape = ([rows] if batching else []) + [1 if d == -1 else d for d in dims]
    dtype = datatypes.from_name(rule.datatype).numpy
    if rule.datatype == "BYTES":
        return np.full(shape, b"", dtype=dtype)
    if rule.missing == "impute":
        return np.full(shape, np.nan, dtype=dtype)
    return np.zeros(shape, dtype=dtype)  # every value takes the default below


def _missing(rule: FieldContract, values: np.ndarray) -> np.ndarray | None:
    """Where ``values`` are written missing; None where none is (or the datatype cannot write one)."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if rule.datatype == "BYTES":
        flat = values.ravel().tolist()
        if b"" not in flat and "" not in flat:
            return None
        return np.array([_is_empty(value) for value in flat], dtype=bool).reshape(values.shape)
    return None


def _is_empty(value: object) -> bool:
    return value == b"" or value == ""


def _treat_missing(
    rule: FieldContract,
    values: np.ndarray,
    missing: np.ndarray,
    rows: int,
    outcome: ContractOutcome,
    model: str,
) -> np.ndarray:
    if rule.missing == "impute":
        return values
    if rule.required:
        raise ContractViolation(
            model,
            rule.name,
            "required",
            "a value is missing (NaN or an empty string) and the field is required; send a value",
        )
    default = rule.default.encode() if isinstance(rule.default, str) else rule.default
    filled = values.copy()  # a request's arrays may be read-only views over the wire's bytes
    filled[missing] = default
    per_row = missing.reshape(rows, -1).any(axis=1) if missing.ndim else missing.reshape(1)
    outcome.filled[rule.name] = [int(row) for row in np.flatnonzero(per_row)]
    return filled


def _check_categories(rule: FieldContract, values: np.ndarray, outcome: ContractOutcome, model: str) -> None:
    known = rule.known
    passes_missing = rule.missing == "impute"  # a missing value is the pipeline's, not a category
    unknown = [
        value
        for value in values.ravel().tolist()
        if value not in known and not (passes_missing and (value != value or _is_empty(value)))
    ]
    if not unknown:
        return
    if rule.unknown_category == "refuse":
        first = unknown[0]
        shown = first.decode(errors="replace") if isinstance(first, bytes) else first
        raise ContractViolation(
            model,
            rule.name,
            "category",
            f"{shown!r} is not a category the model was fitted on, and its pipeline refuses unknown "
            f"categories; send one of {list(rule.categories or ())[:20]}",
        )
    outcome.unknown_categories[rule.name] = len(unknown)


def _check_range(rule: FieldContract, values: np.ndarray, outcome: ContractOutcome, model: str) -> None:
    if values.dtype.kind not in "fiu":
        return
    # The bounds as the values' dtype: the training maximum sent back as float32 is not above it.
    # NaN compares false both ways: a missing value is never outside the range.
    kind = values.dtype if values.dtype.kind == "f" else np.dtype(np.float64)
    low = np.asarray(-np.inf if rule.minimum is None else rule.minimum, dtype=kind)
    high = np.asarray(np.inf if rule.maximum is None else rule.maximum, dtype=kind)
    outside = (values < low) | (values > high)
    count = int(np.count_nonzero(outside))
    if not count:
        return
    if rule.out_of_range == "refuse":
        first = values[outside].ravel()[0].item()
        raise ContractViolation(
            model,
            rule.name,
            "range",
            f"{first!r} is outside the training range [{rule.minimum}, {rule.maximum}] "
            "and the contract refuses such values",
        )
    outcome.out_of_range[rule.name] = count
