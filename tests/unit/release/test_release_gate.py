"""The quality gate: step figures, P95 accuracy, each limit on its own, and consecutive failures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conch.release.compare import Comparison
from conch.release.gate import (
    GateFigures,
    GateLimits,
    GateTracker,
    Judgement,
    Outcome,
    Role,
    VersionFigures,
    judge,
    limits_of,
)
from conch.release.latency_sketch import LATENCY_RELATIVE_ERROR, LatencySketch
from conch.release.spec import DEFAULT_MIN_AGREEMENT, GateSpec
from conch.release.step_figures import StepFigures

LIMITS = GateLimits(
    min_requests=200,
    max_error_rate_increase=0.01,
    max_p95_increase=0.20,
    min_agreement=0.995,
    max_drift_fraction=0.01,
)
HEALTHY = GateFigures(
    baseline=VersionFigures(requests=1000, server_errors=0, p95_s=0.100, execution_p95_s=0.010),
    candidate=VersionFigures(requests=1000, server_errors=0, p95_s=0.100, execution_p95_s=0.010),
    compared=1000,
    agreements=1000,
    drift_scored=1000,
    drifted=0,
)


def outcomes(judgement: Judgement) -> dict[str, Outcome]:
    return {check.name: check.outcome for check in judgement.checks}


def with_candidate(**changes: float) -> GateFigures:
    return dataclasses.replace(HEALTHY, candidate=dataclasses.replace(HEALTHY.candidate, **changes))


def test_healthy_figures_pass_every_check() -> None:
    judgement = judge(HEALTHY, LIMITS)
    assert judgement.ready
    assert not judgement.failed
    assert set(outcomes(judgement).values()) == {Outcome.PASSED}
    assert [c.name for c in judgement.checks] == [
        "error_rate_increase",
        "p95_increase",
        "compute_increase",
        "agreement",
        "drift_fraction",
    ]


def test_nothing_fails_before_min_requests_of_each_version() -> None:
    broken = dataclasses.replace(
        HEALTHY,
        candidate=VersionFigures(requests=199, server_errors=100, p95_s=1.0),
        agreements=0,
        drifted=1000,
    )
    judgement = judge(broken, LIMITS)
    assert not judgement.ready
    assert not judgement.failed
    assert set(outcomes(judgement).values()) == {Outcome.PENDING}
    assert judge(
        dataclasses.replace(broken, candidate=dataclasses.replace(broken.candidate, requests=200)), LIMITS
    ).failed


def test_baseline_below_min_requests_is_not_ready() -> None:
    figures = dataclasses.replace(HEALTHY, baseline=dataclasses.replace(HEALTHY.baseline, requests=150))
    assert not judge(figures, LIMITS).ready
    assert judge(dataclasses.replace(figures, baseline=HEALTHY.baseline), LIMITS).ready


def test_error_rate_increase_fails_just_above_and_passes_just_below() -> None:
    above = judge(with_candidate(server_errors=11), LIMITS)  # 0.011 - 0
    below = judge(with_candidate(server_errors=9), LIMITS)
    assert outcomes(above) == {**outcomes(below), "error_rate_increase": Outcome.FAILED}
    assert not below.failed
    assert above.failures[0].value == pytest.approx(0.011)


def test_error_rate_increase_is_relative_to_the_baseline() -> None:
    figures = dataclasses.replace(
        with_candidate(server_errors=59),
        baseline=dataclasses.replace(HEALTHY.baseline, server_errors=50),
    )
    assert not judge(figures, LIMITS).failed  # 0.059 - 0.050 = 0.009
    assert judge(
        dataclasses.replace(figures, candidate=with_candidate(server_errors=61).candidate), LIMITS
    ).failed


def test_a_figure_at_its_limit_passes() -> None:
    assert not judge(with_candidate(server_errors=10), LIMITS).failed
    at_agreement = dataclasses.replace(HEALTHY, agreements=995)
    assert not judge(at_agreement, LIMITS).failed


def test_p95_increase_fails_just_above_and_passes_just_below() -> None:
    above = judge(with_candidate(p95_s=0.1201), LIMITS)
    below = judge(with_candidate(p95_s=0.1199), LIMITS)
    assert [c.name for c in above.failures] == ["p95_increase"]
    assert not below.failed
    assert above.failures[0].value == pytest.approx(0.201)


def test_agreement_fails_just_below_and_passes_just_above() -> None:
    below = judge(dataclasses.replace(HEALTHY, agreements=994), LIMITS)
    above = judge(dataclasses.replace(HEALTHY, agreements=996), LIMITS)
    assert [c.name for c in below.failures] == ["agreement"]
    assert not above.failed


def test_drift_fraction_fails_just_above_and_passes_just_below() -> None:
    above = judge(dataclasses.replace(HEALTHY, drifted=11), LIMITS)
    below = judge(dataclasses.replace(HEALTHY, drifted=9), LIMITS)
    assert [c.name for c in above.failures] == ["drift_fraction"]
    assert not below.failed


def test_checks_without_comparisons_are_pending() -> None:
    figures = dataclasses.replace(HEALTHY, compared=0, agreements=0, drift_scored=0, drifted=0)
    judgement = judge(figures, LIMITS)
    assert judgement.ready
    assert outcomes(judgement) == {
        "error_rate_increase": Outcome.PASSED,
        "p95_increase": Outcome.PASSED,
        "compute_increase": Outcome.PASSED,
        "agreement": Outcome.PENDING,
        "drift_fraction": Outcome.PENDING,
    }
    assert all(check.ok for check in judgement.checks)


def test_compute_fails_when_the_candidate_s_executions_take_longer_than_the_limit() -> None:
    doubled = judge(with_candidate(execution_p95_s=0.020), LIMITS)
    within = judge(with_candidate(execution_p95_s=0.0149), LIMITS)
    unknown = judge(with_candidate(execution_p95_s=None), LIMITS)
    assert [c.name for c in doubled.failures] == ["compute_increase"]
    assert not within.failed
    assert outcomes(unknown)["compute_increase"] is Outcome.PENDING


def test_no_baseline_p95_is_pending_not_failed() -> None:
    figures = dataclasses.replace(HEALTHY, baseline=dataclasses.replace(HEALTHY.baseline, p95_s=None))
    assert outcomes(judge(figures, LIMITS))["p95_increase"] is Outcome.PENDING


def test_reason_names_the_failed_figure() -> None:
    judgement = judge(dataclasses.replace(HEALTHY, agreements=980), LIMITS)
    assert judgement.reason == "agreement 0.98 (limit 0.995): failed"
    assert judge(HEALTHY, LIMITS).reason == ""


def test_step_figures_count_answers_errors_and_comparisons() -> None:
    step = StepFigures(drift_threshold=0.3)
    for _ in range(8):
        step.record_answer(Role.BASELINE, 0.010, server_error=False)
    step.record_answer(Role.CANDIDATE, 0.020, server_error=False)
    step.record_answer(Role.CANDIDATE, 5.0, server_error=True)
    step.record_comparison(Comparison(agreed=True, drift=0.3))  # at the threshold: not above
    step.record_comparison(Comparison(agreed=False, drift=0.31, disagreeing=("scores",)))
    step.record_comparison(Comparison(agreed=True, drift=None))
    figures = step.snapshot()
    assert (figures.baseline.requests, figures.baseline.server_errors) == (8, 0)
    assert figures.baseline.p95_s == pytest.approx(0.010, rel=0.005)
    # Both versions' latencies in the same buckets, for the latency test: 8 and 1 successful answers.
    assert figures.baseline.latency is not None and figures.candidate.latency is not None
    assert figures.baseline.latency.bounds == figures.candidate.latency.bounds
    assert (figures.baseline.latency.total, figures.candidate.latency.total) == (8, 1)
    assert figures.candidate.requests == 2
    assert figures.candidate.server_errors == 1
    # The failed answer's 5 s is not a latency: a candidate failing slowly or fast is judged on errors.
    assert figures.candidate.p95_s == pytest.approx(0.020, rel=0.005)
    assert (figures.compared, figures.agreements, figures.drift_scored, figures.drifted) == (3, 2, 2, 1)


def test_latencies_compare_client_answers_alike_and_copies_only_where_a_version_answers_no_client() -> None:
    step = StepFigures(drift_threshold=0.3)
    for _ in range(20):
        step.record_answer(Role.BASELINE, 0.010, server_error=False)
        step.record_answer(Role.CANDIDATE, 0.002, server_error=False, copy=True)  # quick copies
    # A dark launch: the candidate answers no client, so its copies are its only latencies.
    dark = step.snapshot()
    assert dark.candidate.p95_s == pytest.approx(0.002, rel=0.005) and dark.baseline.latency is not None
    assert (dark.baseline.latency.total, dark.candidate.latency.total) == (20, 20)  # type: ignore[union-attr]
    for _ in range(10):
        step.record_answer(Role.CANDIDATE, 0.010, server_error=False)
    # Both answer clients now: answer against answer, the copies left out of the comparison.
    alike = step.snapshot()
    assert alike.candidate.p95_s == pytest.approx(0.010, rel=0.005)
    assert alike.candidate.latency is not None and alike.candidate.latency.total == 10
    assert alike.candidate.requests == 30  # every answer still counts for the error rate


def test_reset_forgets_the_previous_step() -> None:
    step = StepFigures(drift_threshold=0.3)
    step.record_answer(Role.CANDIDATE, 0.02, server_error=True)
    step.record_comparison(Comparison(agreed=False, drift=0.9))
    step.reset()
    figures = step.snapshot()
    empty = VersionFigures(0, 0, None)
    assert figures == GateFigures(
        baseline=empty, candidate=empty, slice_log_ratios=(), execution_slice_log_ratios=()
    )


def test_step_figures_feed_the_judgement() -> None:
    step = StepFigures(drift_threshold=0.3)
    for i in range(300):
        step.record_answer(Role.BASELINE, 0.010, server_error=False)
        step.record_answer(Role.CANDIDATE, 0.030, server_error=False)
        step.record_comparison(Comparison(agreed=True, drift=0.0 if i else 0.5))
    judgement = judge(step.snapshot(), LIMITS)
    assert [c.name for c in judgement.failures] == ["p95_increase"]
    assert judgement.failures[0].value == pytest.approx(2.0, rel=0.011)


@pytest.mark.parametrize("seconds", [0.000123, 0.0042, 0.0999, 1.0, 37.5])
def test_sketch_reads_a_single_value_within_its_error(seconds: float) -> None:
    sketch = LatencySketch()
    sketch.observe(seconds)
    value = sketch.quantile(0.95)
    assert value is not None
    assert abs(value / seconds - 1) <= LATENCY_RELATIVE_ERROR + 1e-12


def test_sketch_p95_of_evenly_spread_latencies() -> None:
    sketch = LatencySketch()
    for ms in range(1, 1001):
        sketch.observe(ms / 1000)
    assert sketch.quantile(0.95) == pytest.approx(0.950, rel=LATENCY_RELATIVE_ERROR)
    assert sketch.quantile(0.5) == pytest.approx(0.500, rel=LATENCY_RELATIVE_ERROR)


@pytest.mark.parametrize("distribution", ["exponential", "lognormal", "bimodal"])
def test_sketch_p95_matches_the_nearest_rank_on_known_distributions(distribution: str) -> None:
    rng = np.random.default_rng(7)
    if distribution == "exponential":
        latencies = rng.exponential(0.02, size=20_000)
    elif distribution == "lognormal":
        latencies = rng.lognormal(np.log(0.005), 1.0, size=20_000)
    else:  # most requests fast, a slow tail of 8%
        latencies = np.concatenate([rng.normal(0.004, 0.0005, 18_400), rng.normal(0.2, 0.02, 1_600)])
    sketch = LatencySketch()
    for value in latencies:
        sketch.observe(float(value))
    exact = float(np.sort(latencies)[int(np.ceil(0.95 * latencies.size)) - 1])
    assert sketch.quantile(0.95) == pytest.approx(exact, rel=LATENCY_RELATIVE_ERROR)


def test_sketch_sees_a_twenty_percent_rise() -> None:
    rng = np.random.default_rng(11)
    latencies = rng.lognormal(np.log(0.01), 0.5, size=5_000)
    limits = dataclasses.replace(LIMITS, min_requests=1)

    def p95_increase(factor: float) -> float | None:
        step = StepFigures(drift_threshold=0.3)
        for value in latencies:
            step.record_answer(Role.BASELINE, float(value), server_error=False)
            step.record_answer(Role.CANDIDATE, float(value) * factor, server_error=False)
        return next(c.value for c in judge(step.snapshot(), limits).checks if c.name == "p95_increase")

    # The error of a ratio of two readings is at most about twice the sketch's error.
    assert p95_increase(1.18) == pytest.approx(0.18, abs=2.2 * LATENCY_RELATIVE_ERROR)
    assert p95_increase(1.23) == pytest.approx(0.23, abs=2.2 * LATENCY_RELATIVE_ERROR)


def test_empty_sketch_has_no_quantile() -> None:
    assert LatencySketch().quantile(0.95) is None


def failing() -> Judgement:
    return judge(dataclasses.replace(HEALTHY, agreements=900), LIMITS)


def passing() -> Judgement:
    return judge(HEALTHY, LIMITS)


def not_ready() -> Judgement:
    return judge(with_candidate(requests=10), LIMITS)


def test_threshold_reached_after_consecutive_failures() -> None:
    tracker = GateTracker(failure_threshold=2)
    assert not tracker.observe(failing())
    assert tracker.consecutive_failures == 1
    assert tracker.observe(failing())
    assert tracker.threshold_reached
    assert tracker.last_failure is not None
    assert "agreement" in tracker.last_failure.reason


def test_a_pass_resets_the_count() -> None:
    tracker = GateTracker(failure_threshold=2)
    tracker.observe(failing())
    assert not tracker.observe(passing())
    assert tracker.consecutive_failures == 0
    assert not tracker.observe(failing())


def test_a_judgement_without_failure_resets_even_before_min_requests() -> None:
    tracker = GateTracker(failure_threshold=2)
    tracker.observe(failing())
    assert not tracker.observe(not_ready())
    assert tracker.consecutive_failures == 0
    assert not tracker.observe(failing())


def test_threshold_one_trips_at_the_first_failure() -> None:
    tracker = GateTracker(failure_threshold=1)
    assert not tracker.observe(passing())
    assert tracker.observe(failing())


def test_reset_starts_a_new_step() -> None:
    tracker = GateTracker(failure_threshold=2)
    tracker.observe(failing())
    tracker.observe(failing())
    tracker.reset()
    assert not tracker.threshold_reached
    assert tracker.last_failure is None
    assert not tracker.observe(failing())


def test_limits_of_a_gate_spec_are_its_own_figures() -> None:
    gate = GateSpec(
        min_requests=7,
        max_error_rate_increase=0.02,
        max_p95_increase=0.5,
        min_agreement=0.9,
        max_drift_fraction=0.03,
    )

    assert dataclasses.astuple(limits_of(gate))[:5] == (7, 0.02, 0.5, 0.9, 0.03)
    # Without min_agreement the release's resolved limit applies, else the documented default.
    assert limits_of(GateSpec(), min_agreement=0.97).min_agreement == 0.97
    assert limits_of(GateSpec()).min_agreement == DEFAULT_MIN_AGREEMENT == 0.98
    # The release's 5% is spread over 5 checks and the judged steps.
    assert limits_of(GateSpec(), steps=2).alpha == pytest.approx(0.05 / 10)
    assert limits_of(dataclasses.replace(gate, max_compute_increase=0.3)).max_compute_increase == 0.3


def test_a_versions_first_answers_of_the_release_are_counted_not_timed() -> None:
    step = StepFigures(drift_threshold=0.3, warming=2)
    for seconds in (0.5, 0.4, 0.010):  # a cold start, then the version's own speed
        step.record_answer(Role.CANDIDATE, seconds, server_error=False)
    figures = step.snapshot()
    assert figures.candidate.requests == 3
    assert figures.candidate.p95_s == pytest.approx(0.010, rel=0.01)
    step.reset()  # a new step: the version is warm by now
    step.record_answer(Role.CANDIDATE, 0.020, server_error=False)
    assert step.snapshot().candidate.p95_s == pytest.approx(0.020, rel=0.01)
