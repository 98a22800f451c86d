"""Does the exported ONNX model compute what the original did? Output by output, on the sample.

The tolerance is numpy's ``isclose``: ``|onnx - original| <= ATOL + RTOL * |original|``. It allows for
float32 arithmetic (ONNX graphs and servers usually run in float32 where a notebook ran in float64)
and for operators computed in another order, and nothing more: a probability may move by 1e-5, a
prediction of 50,000 by 5. Labels, integers and strings must be equal. NaNs must be in the same places.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.exporting.errors import ExportError

RTOL = 1e-4
ATOL = 1e-5
TOLERANCE = f"|onnx - original| <= {ATOL:g} + {RTOL:g} * |original|"


@dataclass(frozen=True)
class Reference:
    """What the original model computed for one ONNX output, and with which method."""

    method: str
    values: np.ndarray


@dataclass(frozen=True)
class OutputDisagreement:
    """One output on which ONNX Runtime and the original differ, described for a person."""

    output: str
    method: str
    detail: str

    def __str__(self) -> str:
        return f"output '{self.output}' ({self.method}): {self.detail}"


class DisagreementError(ExportError):
    """ONNX Runtime's outputs on the sample differ from the original model's beyond the tolerance.

    ``rows`` are the sample's rows where any output differs; ``causes`` what may explain them, most
    likely first (a missing text value, a category never seen), when the converter could tell.
    """

    def __init__(
        self,
        disagreements: list[OutputDisagreement],
        rows: list[int] | None = None,
        causes: list[str] | None = None,
    ) -> None:
        self.disagreements = disagreements
        self.rows = rows or []
        self.causes = causes or []
        where = f" in row(s) {self.rows[:20]}" if self.rows else ""
        likely = "".join(f"Likely cause: {cause}\n" for cause in self.causes)
        lines = "\n".join(f"  - {d}" for d in disagreements)
        other = "Other causes" if self.causes else "Common causes"
        super().__init__(
            f"the ONNX model disagrees with the original on the sample{where} (tolerance: {TOLERANCE}):\n"
            f"{likely}{lines}\nNothing was written. {other}: float64 features that float32 cannot hold "
            "(large values such as timestamps or identifiers), operators the converter approximates, or "
            "randomness the model uses at inference."
        )


def check_agreement(
    references: Mapping[str, Reference],
    outputs: Mapping[str, np.ndarray],
    likely_causes: Callable[[list[int]], list[str]] | None = None,
) -> None:
    """Raise :class:`DisagreementError` naming every output, and the rows, that differ.

    ``likely_causes`` turns the rows into what may explain them (``Conversion.likely_causes``).
    """
    found = []
    rows: set[int] = set()
    for name, reference in references.items():
        detail = compare(reference.values, outputs[name])
        if detail is not None:
            found.append(OutputDisagreement(name, reference.method, detail))
            rows.update(differing_rows(reference.values, outputs[name]))
    if found:
        ordered = sorted(rows)
        causes = likely_causes(ordered) if likely_causes is not None and ordered else []
        raise DisagreementError(found, ordered, causes)


def differing_rows(expected: np.ndarray, actual: np.ndarray) -> list[int]:
    """The first-axis positions where ``actual`` differs from ``expected`` (none if shapes differ)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.size != actual.size or actual.ndim == 0:
        return []
    expected = expected.reshape(actual.shape)
    if _is_float(expected) or _is_float(actual):
        differs = ~np.isclose(
            actual.astype(np.float64), expected.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True
        )
    else:
        differs = np.asarray(expected != actual, dtype=bool).reshape(actual.shape)
    return np.flatnonzero(differs.reshape(len(actual), -1).any(axis=1)).tolist()


def compare(expected: np.ndarray, actual: np.ndarray) -> str | None:
    """None when ``actual`` agrees with ``expected``, else what differs, how much, and where."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.size != actual.size:
        return f"shape {list(actual.shape)}, the original's is {list(expected.shape)}"
    expected = expected.reshape(actual.shape)
    if _is_float(expected) or _is_float(actual):
        return _compare_numbers(expected.astype(np.float64), actual.astype(np.float64))
    differs = np.asarray(expected != actual, dtype=bool).reshape(actual.shape)
    if not differs.any():
        return None
    first = _first(differs)
    return (
        f"{int(differs.sum())} of {actual.size} elements differ; first at {list(first)}: "
        f"original {_show(expected[first])}, ONNX {_show(actual[first])}"
    )


def _compare_numbers(expected: np.ndarray, actual: np.ndarray) -> str | None:
    close = np.isclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    if close.all():
        return None
    nan_moved = np.isnan(expected) != np.isnan(actual)
    parts = [f"{int((~close).sum())} of {actual.size} elements differ"]
    numeric = ~close & ~nan_moved
    if numeric.any():
        with np.errstate(invalid="ignore"):
            gap = np.where(numeric, np.abs(actual - expected), -1.0)
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(gap)), gap.shape))
        relative = gap[worst] / abs(expected[worst]) if expected[worst] else float("inf")
        parts.append(
            f"worst at {list(worst)}: original {expected[worst]:.7g}, ONNX {actual[worst]:.7g} "
            f"(absolute difference {gap[worst]:.3g}, relative {relative:.3g})"
        )
    if nan_moved.any():
        first = _first(nan_moved)
        parts.append(
            f"NaN in different places at {int(nan_moved.sum())} elements, first at {list(first)}: "
            f"original {expected[first]:.7g}, ONNX {actual[first]:.7g}"
        )
    return "; ".join(parts)


def _is_float(array: np.ndarray) -> bool:
    return bool(np.issubdtype(array.dtype, np.floating))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _show(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)
