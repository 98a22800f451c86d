"""One request answered by two versions: do their predictions agree, and how far do they drift?

The gate judges a candidate by what it predicts, not only by how fast and how often it fails. For each
request that ran on both versions (a shadow copy), every compared output gives two figures:

- **drift**, for floating-point outputs: ``1 - cosine(baseline, candidate)`` of the flattened outputs.
  It ignores scale (a model that doubles every score drifts 0) and sees a change of direction
  (probabilities moved from one class to another). The cosine distance of real vectors lies in
  ``[0, 2]``: 0 for the same direction, 1 for orthogonal ones, 2 for opposite ones.
- **agreement**: the same decision. A float output whose last dimension is above 1 holds scores per
  class, so the argmax of every row must be the same. Integer, BOOL and BYTES outputs (labels, ids,
  strings) must be equal. Any other float output (a regression value, a single logit) must be within
  the validator's tolerance of batch invariance (:data:`conch.core.tolerances.TOLERANCES`), the
  same figure that says two runs of one model compute the same thing.

A request agrees when all its compared outputs agree; its drift is the largest of its float outputs'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from conch.core.datatypes import from_name
from conch.core.tolerances import tolerance_for

#: Drift of outputs that cannot be compared as vectors (shapes differ, an output is missing, a value is
#: NaN or infinite): as far apart as two unrelated (orthogonal) vectors, so such a request counts as
#: drifting at any threshold below 1 instead of going unnoticed.
UNCOMPARABLE_DRIFT = 1.0


@dataclass(frozen=True)
class Comparison:
    """What one request's two answers say about each other.

    ``drift`` is None when no compared output is floating-point; ``disagreeing`` names the outputs
    that do not agree, for the release history.
    """

    agreed: bool
    drift: float | None
    disagreeing: tuple[str, ...] = ()


def drift_score(a: np.ndarray, b: np.ndarray) -> float:
    """``1 - cosine`` of the flattened outputs, in ``[0, 2]``.

    Two zero vectors are the same prediction (0); a zero vector against a non-zero one has no angle
    and counts as unrelated (1). Outputs of different sizes, or holding NaN or infinity, get
    :data:`UNCOMPARABLE_DRIFT`: a NaN is a broken prediction, and it must not hide in a NaN figure.
    """
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.size != y.size or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return UNCOMPARABLE_DRIFT
    x_scale = float(np.max(np.abs(x))) if x.size else 0.0
    y_scale = float(np.max(np.abs(y))) if y.size else 0.0
    if x_scale == 0.0 and y_scale == 0.0:
        return 0.0
    if x_scale == 0.0 or y_scale == 0.0:
        return 1.0
    # Scaled to a largest magnitude of 1 first, so the squares of float32 maxima cannot overflow.
    x, y = x / x_scale, y / y_scale
    cosine = float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))
    return min(max(1.0 - cosine, 0.0), 2.0)  # rounding can step just outside the range


def agree(a: np.ndarray, b: np.ndarray, datatype: str) -> bool:
    """Whether two answers of one output make the same prediction (see the module's rules)."""
    if a.shape != b.shape:
        return False
    if from_name(datatype).numpy.kind != "f":
        return bool(a.tolist() == b.tolist())  # exact; works for BYTES object arrays too
    if a.ndim >= 1 and a.shape[-1] > 1:
        return bool(np.array_equal(np.argmax(a, axis=-1), np.argmax(b, axis=-1)))
    rtol, atol = tolerance_for(a.dtype)
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def compare_outputs(
    baseline: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    datatypes: Mapping[str, str],
    names: Sequence[str] | None = None,
) -> Comparison:
    """Compare the outputs named by ``names`` (the release's ``compare``; None: all the baseline's).

    ``datatypes`` gives each output's V2 datatype. An output that one version did not return
    disagrees, and drifts by :data:`UNCOMPARABLE_DRIFT` when it is floating-point.
    """
    compared = list(names) if names is not None else sorted(baseline)
    disagreeing: list[str] = []
    drifts: list[float] = []
    for name in compared:
        is_float = from_name(datatypes[name]).numpy.kind == "f"
        if name not in baseline or name not in candidate:
            disagreeing.append(name)
            if is_float:
                drifts.append(UNCOMPARABLE_DRIFT)
            continue
        old, new = np.asarray(baseline[name]), np.asarray(candidate[name])
        if not agree(old, new, datatypes[name]):
            disagreeing.append(name)
        if is_float:
            drifts.append(drift_score(old, new))
    return Comparison(
        agreed=not disagreeing, drift=max(drifts) if drifts else None, disagreeing=tuple(disagreeing)
    )
