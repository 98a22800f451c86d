"""The latency test's noise between moments (:mod:`conch.release.time_slices`): a step cut into time
slices on a simulated clock, and the verdicts of :func:`compare_latency` on versions whose latencies
swing together for seconds at a time, as queues do under load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conch.release.gate import GateFigures, Role
from conch.release.sequential import Verdict, compare_latency, latency_verdict
from conch.release.step_figures import StepFigures
from conch.release.time_slices import ANSWERS_PER_SLICE, MIN_SLICES, SLICE_S, TimeSlices, slice_noise
from tests.fixtures.release_fakes import Clock

LIMIT = 0.2  # the default max_p95_increase


def test_a_slice_closes_once_it_is_long_enough_and_both_versions_answered_enough() -> None:
    clock = Clock()
    slices = TimeSlices(clock)
    for _ in range(ANSWERS_PER_SLICE):
        slices.observe(False, 0.010)
    for _ in range(ANSWERS_PER_SLICE - 1):
        slices.observe(True, 0.020)
    clock.now += SLICE_S
    slices.observe(False, 0.010)
    assert slices.log_ratios == [], "long enough, but the candidate answered too few"
    slices.observe(True, 0.020)
    assert slices.log_ratios == [pytest.approx(math.log(2.0))]
    for _ in range(ANSWERS_PER_SLICE):
        slices.observe(False, 0.010)
        slices.observe(True, 0.010)
    assert len(slices.log_ratios) == 1, "not yet long enough"
    clock.now += SLICE_S
    slices.observe(True, 0.010)
    assert slices.log_ratios[-1] == 0.0
    for _ in range(ANSWERS_PER_SLICE):
        slices.observe(False, 0.010)
    clock.now += 10 * SLICE_S
    for _ in range(ANSWERS_PER_SLICE - 1):
        slices.observe(True, 0.010)
    assert len(slices.log_ratios) == 2, "a quiet slice waits for its answers however long it lasts"


def test_the_noise_between_slices_needs_enough_of_them() -> None:
    assert slice_noise([0.1] * (MIN_SLICES - 1)) is None
    assert slice_noise([0.0, 0.2] * MIN_SLICES) == pytest.approx(
        np.std([0.0, 0.2] * 5, ddof=1) / math.sqrt(10)
    )


def swinging_step(seed: int, slowdown: float, swing: float = 0.3, slices: int = 12) -> GateFigures:
    """``slices`` slices of 3 simulated seconds, 300 answers of each version in each; each version's
    latencies in a slice are scaled by a factor of its own for the slice (log-normal, ``swing``), and
    the candidate's by ``slowdown`` too."""
    rng = np.random.default_rng(seed)
    clock = Clock()
    step = StepFigures(drift_threshold=0.3, clock=clock)
    for _ in range(slices):
        base_swing, cand_swing = rng.lognormal(0.0, swing, 2)
        base = rng.lognormal(math.log(0.02), 0.3, 300) * base_swing
        cand = rng.lognormal(math.log(0.02), 0.3, 300) * cand_swing * slowdown
        for first, second in zip(base, cand, strict=True):
            step.record_answer(Role.BASELINE, float(first), server_error=False)
            step.record_answer(Role.CANDIDATE, float(second), server_error=False)
        clock.now += SLICE_S
    return step.snapshot()


def verdict(figures: GateFigures, sliced: bool) -> str:
    assert figures.baseline.latency is not None and figures.candidate.latency is not None
    ratios = figures.slice_log_ratios or ()
    compared = compare_latency(
        figures.baseline.latency,
        figures.candidate.latency,
        0.001,
        LIMIT,
        slice_noise=slice_noise(ratios) if sliced else None,
        slices=len(ratios),
    )
    assert compared is not None
    return latency_verdict(compared, LIMIT)


def test_an_identical_candidate_whose_queue_swings_apart_is_not_found_slower() -> None:
    steps = [swinging_step(seed, slowdown=1.0) for seed in range(40)]
    assert all(len(step.slice_log_ratios or ()) >= 11 for step in steps)
    as_independent = sum(verdict(step, sliced=False) == Verdict.BEYOND for step in steps)
    between_slices = sum(verdict(step, sliced=True) == Verdict.BEYOND for step in steps)
    assert as_independent >= 2, "the swings must be large enough to fool the test of independent answers"
    assert between_slices == 0


def test_a_candidate_twice_as_slow_is_still_found_slower() -> None:
    steps = [swinging_step(seed, slowdown=2.0) for seed in range(40)]
    assert sum(verdict(step, sliced=True) == Verdict.BEYOND for step in steps) >= 38
