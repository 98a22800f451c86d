"""How far two floating-point answers may differ and still be the same answer.

One table for every comparison of model outputs: ``conch validate``'s batch invariance (a row batched
against that row alone) and a release's agreement check (a candidate's output against the baseline's).
A batched execution or another build of the same graph reorders sums, so equal answers differ in
their last bits; the bounds follow each dtype's precision.
"""

from __future__ import annotations

import numpy as np

#: (relative, absolute) tolerance per floating-point numpy dtype.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(np.float32): (1e-4, 1e-5),
    np.dtype(np.float64): (1e-9, 1e-12),
}


def tolerance_for(dtype: np.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype``; float32's for any other floating dtype."""
    return TOLERANCES.get(dtype, TOLERANCES[np.dtype(np.float32)])
