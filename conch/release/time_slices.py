"""The latency test's noise between moments: a step's answers cut into time slices, and the candidate's
P95 over the baseline's within each.

Why: answers of the same few seconds are not independent draws. Under load a version's queue swells
and drains over seconds, and the two versions' queues do so apart from each other. An identical
candidate at 50% on a saturated 2-core server read a P95 ratio of 0.61 to 1.30 from one 4-second
window to the next, while the noise of randomly split answers (which treats every answer as
independent) said +-3%; one such release was rolled back at +29%. The spread of the per-slice ratios
measures that noise directly, in the same window for both versions, so the test widens its bound to
it (:func:`slice_noise`), and a latency failure needs :data:`MIN_SLICES` slices behind it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: A slice closes once it is this long and each version answered :data:`ANSWERS_PER_SLICE` in it
#: (longer on a quiet server). Shorter than the queue swings, and neighbouring slices would move
#: together and understate the noise; much longer, and a one-minute step holds too few.
SLICE_S = 3.0
#: Answers of each version a slice needs for its P95 to rest on a few answers above it.
ANSWERS_PER_SLICE = 40
#: Closed slices the latency test needs before its noise between slices counts, and before it may
#: find the candidate slower.
MIN_SLICES = 5


class TimeSlices:
    """The current slice's latencies of each version, and the log P95 ratio of every closed slice."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.log_ratios: list[float] = []
        self._reset(clock())

    def _reset(self, now: float) -> None:
        self._started = now
        self._baseline: list[float] = []
        self._candidate: list[float] = []

    def observe(self, candidate: bool, seconds: float) -> None:
        """One timed client answer of the candidate (or of the baseline)."""
        (self._candidate if candidate else self._baseline).append(seconds)
        if len(self._candidate) < ANSWERS_PER_SLICE or len(self._baseline) < ANSWERS_PER_SLICE:
            return
        now = self._clock()
        if now - self._started < SLICE_S:
            return
        base, cand = np.percentile(self._baseline, 95), np.percentile(self._candidate, 95)
        if base > 0 and cand > 0:
            self.log_ratios.append(math.log(cand / base))
        self._reset(now)


def slice_noise(log_ratios: Sequence[float]) -> float | None:
    """The standard error of the mean log P95 ratio over the slices (the spread between them over the
    square root of their number); None before :data:`MIN_SLICES` slices."""
    if len(log_ratios) < MIN_SLICES:
        return None
    return float(np.std(log_ratios, ddof=1)) / math.sqrt(len(log_ratios))
