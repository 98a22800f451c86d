"""How sure a measured agreement is: Wilson's 95% score interval of the share of reference rows on
which two versions agree, and the fewest rows worth measuring."""

from __future__ import annotations

import math

#: Fewer reference rows give an interval wider than the gate's 1% margin: 200 rows that all agree
#: give a lower bound of 0.981.
MIN_REFERENCE_ROWS = 200
_Z95 = 1.959964


class ReferenceError(ValueError):
    """The reference frame cannot be read or does not fit the model; the message says how to fix it."""


def wilson_interval(agreeing: int, rows: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a share of ``agreeing`` in ``rows``."""
    share = agreeing / rows
    spread = _Z95 * math.sqrt(share * (1 - share) / rows + _Z95**2 / (4 * rows**2))
    centre = share + _Z95**2 / (2 * rows)
    scale = 1 + _Z95**2 / rows
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)
