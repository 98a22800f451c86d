"""The sequential gate: always-valid rate bounds, the latency test and its noise, and the judgement
that ties them (failed, passed or pending, and which pending checks may end a step)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conch.release.compare import Comparison
from conch.release.gate import GateFigures, GateLimits, Outcome, Role, VersionFigures
from conch.release.sequential import (
    FIRST_LATENCY_LOOK,
    LatencyHistogram,
    LatencyLooks,
    Verdict,
    compare_latency,
    latency_look,
    latency_verdict,
    look_alpha,
    quantile_of,
    rate_bound,
    rate_verdict,
)
from conch.release.sequential_gate import judge_sequentially
from conch.release.step_figures import StepFigures
from tests.fixtures.release_fakes import Clock

LIMITS = GateLimits(200, 0.01, 0.20, 0.98, 0.01, alpha=0.05 / 8)


def test_a_rate_bound_holds_the_estimate_and_narrows_with_more_trials() -> None:
    few, many = rate_bound(95, 100, 0.01), rate_bound(9500, 10_000, 0.01)
    assert few.lower < 0.95 < few.upper and many.lower < 0.95 < many.upper
    assert many.upper - many.lower < (few.upper - few.lower) / 5
    assert rate_bound(0, 0, 0.01) == rate_bound(0, 0, 0.5)  # nothing known: [0, 1]
    assert rate_bound(0, 0, 0.01).lower == 0.0 and rate_bound(0, 0, 0.01).upper == 1.0


def test_the_bound_holds_at_every_look_far_more_often_than_a_fixed_interval_re_read() -> None:
    """A true rate of 0.98 watched after every trial for 2,000 trials: the always-valid bound ever
    excludes it in at most alpha of the runs, where a 95% normal interval re-read does in most."""
    rng = np.random.default_rng(3)
    runs, trials, alpha = 200, 2000, 0.05
    sequential_misses = fixed_misses = 0
    for _ in range(runs):
        events = np.cumsum(rng.random(trials) < 0.98)
        looks = range(20, trials + 1, 20)
        sequential_misses += any(
            rate_verdict(events[n - 1], n, 0.98, alpha, at_least=True) != Verdict.UNSURE for n in looks
        )
        fixed_misses += any(abs(events[n - 1] / n - 0.98) > 1.96 * math.sqrt(0.98 * 0.02 / n) for n in looks)
    assert sequential_misses <= alpha * runs
    assert fixed_misses > 4 * sequential_misses + 0.2 * runs


@pytest.mark.parametrize(
    ("events", "trials", "limit", "at_least", "verdict"),
    [
        (6, 10, 0.98, True, Verdict.BEYOND),  # shuffled labels: out after 10 comparisons
        (1000, 1000, 0.98, True, Verdict.WITHIN),
        (97, 100, 0.98, True, Verdict.UNSURE),
        (0, 1000, 0.01, False, Verdict.WITHIN),  # drift: none of 1,000 above the threshold
        (30, 100, 0.01, False, Verdict.BEYOND),
        (5, 5, 1.0, True, Verdict.UNSURE),  # a limit of 1 is never proven, only broken
        (4, 5, 1.0, True, Verdict.BEYOND),
    ],
)
def test_rate_verdicts(events: int, trials: int, limit: float, at_least: bool, verdict: str) -> None:
    assert rate_verdict(events, trials, limit, 0.05 / 8, at_least) == verdict


def histogram(samples: np.ndarray, bounds: np.ndarray) -> LatencyHistogram:
    counts = np.histogram(samples, bins=np.concatenate([[bounds[0] / 2], bounds]))[0]
    return LatencyHistogram(float(bounds[0] / 2), tuple(bounds), tuple(float(c) for c in counts))


BOUNDS = np.geomspace(1e-4, 1.0, 400)


def test_quantile_of_interpolates_inside_its_bucket_as_prometheus_does() -> None:
    prometheus = LatencyHistogram(0.0, (0.1, 0.2, math.inf), (50.0, 50.0, 0.0))
    assert quantile_of(prometheus, np.array([50.0, 50.0, 0.0]), 0.75) == pytest.approx(0.15)
    assert quantile_of(prometheus, np.array([0.0, 0.0, 10.0]), 0.95) == 0.2  # +Inf: its lower bound
    assert quantile_of(prometheus, np.array([0.0, 0.0, 0.0]), 0.95) is None


def test_latency_noise_from_the_baseline_itself_separates_a_copy_from_a_slowdown() -> None:
    rng = np.random.default_rng(5)
    base = histogram(rng.lognormal(np.log(1e-3), 0.4, 4000), BOUNDS)
    same = histogram(rng.lognormal(np.log(1e-3), 0.4, 400), BOUNDS)
    slow = histogram(rng.lognormal(np.log(2e-3), 0.4, 400), BOUNDS)
    copy, doubled = compare_latency(base, same, 0.001), compare_latency(base, slow, 0.001)
    assert copy is not None and doubled is not None
    assert 0 < copy.noise < 0.15, "a P95 of 400 answers against 4,000: a few percent of noise"
    assert abs(copy.log_ratio) < copy.bound
    assert doubled.log_ratio - doubled.bound > math.log(1.2)


def test_latency_looks_come_at_each_doubling_and_spend_a_shrinking_share_of_alpha() -> None:
    assert [latency_look(n) for n in (0, FIRST_LATENCY_LOOK - 1, FIRST_LATENCY_LOOK)] == [0, 0, 1]
    assert latency_look(2 * FIRST_LATENCY_LOOK) == 2 and latency_look(4 * FIRST_LATENCY_LOOK - 1) == 2
    spent = sum(look_alpha(0.05, k) for k in range(1, 10_000))
    assert spent == pytest.approx(0.05, rel=1e-3) and spent < 0.05


def step_figures(
    agreement: float, compared: int, answers: int, slowdown: float = 1.0, compute: float | None = None
) -> GateFigures:
    """``answers`` of each version over 30 simulated seconds, the two versions' answers interleaved;
    with ``compute``, each answer's execution too (the candidate's ``compute`` times as long)."""
    rng = np.random.default_rng(11)
    clock = Clock()
    step = StepFigures(drift_threshold=0.3, clock=clock)
    base = rng.lognormal(np.log(1e-3), 0.3, answers)
    cand = rng.lognormal(np.log(1e-3), 0.3, answers) * slowdown
    runs = np.random.default_rng(12)  # apart, so the other figures stay as they were drawn
    base_runs = runs.lognormal(np.log(3e-4), 0.2, answers)
    cand_runs = runs.lognormal(np.log(3e-4), 0.2, answers) * (compute or 1.0)
    for second in np.array_split(np.arange(answers), 30):
        for index in second:
            base_run, cand_run = (None, None) if compute is None else (base_runs[index], cand_runs[index])
            step.record_answer(Role.BASELINE, float(base[index]), False, execution=base_run)
            step.record_answer(Role.CANDIDATE, float(cand[index]), False, execution=cand_run)
        clock.now += 1.0
    for agreed in rng.random(compared) < agreement:
        step.record_comparison(Comparison(bool(agreed), 0.0 if agreed else 0.9))
    return step.snapshot()


def outcomes(figures: GateFigures) -> dict[str, Outcome]:
    judgement = judge_sequentially(figures, LIMITS, LatencyLooks())
    return {check.name: check.outcome for check in judgement.checks}


def test_a_bad_candidate_fails_before_min_requests_and_a_good_one_passes_after() -> None:
    bad = judge_sequentially(step_figures(0.6, 20, 20), LIMITS, LatencyLooks())
    assert not bad.ready and [c.name for c in bad.failures] == ["agreement", "drift_fraction"]
    good = judge_sequentially(step_figures(1.0, 2000, 2000), LIMITS, LatencyLooks())
    assert good.settled, good.waiting
    assert {c.name: c.outcome for c in good.checks}["agreement"] is Outcome.PASSED


def test_a_pass_waits_for_min_requests_and_says_so() -> None:
    judgement = judge_sequentially(step_figures(1.0, 2000, 150), LIMITS, LatencyLooks())
    assert not judgement.settled
    agreement = next(c for c in judgement.checks if c.name == "agreement")
    assert agreement.outcome is Outcome.PENDING and agreement.detail == "150 of 200 answers of each version"


def test_an_unproven_agreement_keeps_the_step_open_but_an_unproven_error_rate_does_not() -> None:
    judgement = judge_sequentially(step_figures(0.99, 600, 600), LIMITS, LatencyLooks())
    pending = {c.name: c.settles for c in judgement.checks if c.outcome is Outcome.PENDING}
    assert pending["agreement"] is False
    assert pending["error_rate_increase"] is True, "no errors in 600: within the limit, not proven"
    assert not judgement.settled and judgement.waiting.startswith("agreement 0.9")


def test_a_doubled_latency_fails_at_the_first_look_and_keeps_failing_until_the_next() -> None:
    looks = LatencyLooks()  # needed=1: failure_threshold 1
    first = judge_sequentially(step_figures(1.0, 10, 300, slowdown=2.0), LIMITS, looks)
    assert {c.name: c.outcome for c in first.checks}["p95_increase"] is Outcome.FAILED
    assert looks.look == 1
    again = judge_sequentially(step_figures(1.0, 10, 300, slowdown=1.0), LIMITS, looks)
    assert {c.name: c.outcome for c in again.checks}["p95_increase"] is Outcome.FAILED, "same look"


def latency_check(figures: GateFigures, looks: LatencyLooks, now: float = 0.0) -> tuple[Outcome, str]:
    judgement = judge_sequentially(figures, LIMITS, looks, now)
    check = next(c for c in judgement.checks if c.name == "p95_increase")
    return check.outcome, check.detail


def test_with_a_threshold_of_two_a_slow_look_is_confirmed_by_the_next_or_cleared() -> None:
    # A slow moment at the first look (300 answers), gone by the second (600): never a failure.
    looks = LatencyLooks(needed=2)
    outcome, detail = latency_check(step_figures(1.0, 10, 300, slowdown=2.0), looks)
    assert outcome is Outcome.PENDING and "slower at look 1 (1 of 2 in a row" in detail
    outcome, _ = latency_check(step_figures(1.0, 10, 600, slowdown=1.0), looks)
    assert outcome is not Outcome.FAILED and looks.look == 2 and looks.beyond == 0
    # A candidate slower at two looks in a row fails at the second.
    looks = LatencyLooks(needed=2)
    assert latency_check(step_figures(1.0, 10, 300, slowdown=2.0), looks)[0] is Outcome.PENDING
    assert latency_check(step_figures(1.0, 10, 600, slowdown=2.0), looks)[0] is Outcome.FAILED


def test_a_slower_candidate_fails_only_once_it_has_stayed_slower_for_hold_s() -> None:
    looks = LatencyLooks(needed=2, hold_s=10.0)
    assert latency_check(step_figures(1.0, 10, 300, slowdown=2.0), looks, now=100.0)[0] is Outcome.PENDING
    outcome, detail = latency_check(step_figures(1.0, 10, 600, slowdown=2.0), looks, now=101.0)
    assert outcome is Outcome.PENDING and "for 1 of 10 s" in detail, "two looks, but 1 s apart"
    assert latency_check(step_figures(1.0, 10, 600, slowdown=2.0), looks, now=110.5)[0] is Outcome.FAILED
    # A look that clears it starts the time again.
    looks = LatencyLooks(needed=2, hold_s=10.0)
    latency_check(step_figures(1.0, 10, 300, slowdown=2.0), looks, now=0.0)
    latency_check(step_figures(1.0, 10, 600, slowdown=1.0), looks, now=5.0)
    assert looks.slower_since is None and looks.beyond == 0


def test_a_settling_step_counts_answers_without_timing_them() -> None:
    step = StepFigures(drift_threshold=0.3, settling=True)
    for role in Role:
        step.record_answer(role, 0.5, server_error=False)
    settling = step.snapshot()
    assert settling.candidate.requests == 1 and settling.candidate.p95_s is None
    step.timing = True
    for role in Role:
        step.record_answer(role, 0.002, server_error=False)
    timed = step.snapshot()
    assert timed.candidate.requests == 2 and timed.candidate.p95_s == pytest.approx(0.002, rel=0.01)
    step.reset(settling=True)
    assert not step.timing and step.snapshot().baseline.requests == 0


def test_without_latency_samples_the_p95_estimate_is_shown_and_settles_when_within() -> None:
    figures = GateFigures(
        VersionFigures(500, 0, 0.010), VersionFigures(500, 0, 0.011), compared=500, agreements=500
    )
    check = next(
        c for c in judge_sequentially(figures, LIMITS, LatencyLooks()).checks if c.name == "p95_increase"
    )
    assert check.outcome is Outcome.PENDING and check.settles
    assert check.value == pytest.approx(0.1)


def test_the_rank_test_proves_a_whole_distribution_slower_where_the_p95_cannot() -> None:
    """1.4 times slower everywhere, 250 answers against 2,500, with heavy tails: the P95's bound is too
    wide to prove a rise above 20%, the rank of every latency divided by 1.2 is not; the same versions
    (and one 15% faster) never fail it."""
    rng = np.random.default_rng(9)

    def sample(scale: float, count: int) -> np.ndarray:
        return scale * 1e-3 * rng.lognormal(0, 0.45, count) * np.where(rng.random(count) < 0.03, 6, 1)

    base = histogram(sample(1.0, 2500), BOUNDS)
    slower = compare_latency(base, histogram(sample(1.4, 250), BOUNDS), 0.0005, max_increase=0.2)
    assert slower is not None
    assert slower.log_ratio - slower.bound <= math.log(1.2), "the P95 alone does not prove it"
    assert latency_verdict(slower, 0.2) == Verdict.BEYOND
    for scale in (1.0, 0.85):
        same = compare_latency(base, histogram(sample(scale, 250), BOUNDS), 0.0005, max_increase=0.2)
        assert same is not None and latency_verdict(same, 0.2) != Verdict.BEYOND


def test_a_candidate_computing_twice_as_long_fails_compute_even_where_its_latency_looks_alike() -> None:
    """In a release's shared line both versions' latencies mix both versions' executions; the
    executions themselves still show the candidate's cost."""
    doubled = judge_sequentially(step_figures(1.0, 2000, 2000, compute=2.0), LIMITS, LatencyLooks())
    checks = {c.name: c for c in doubled.checks}
    assert checks["compute_increase"].outcome is Outcome.FAILED
    assert checks["compute_increase"].value == pytest.approx(1.0, abs=0.15)
    assert checks["p95_increase"].outcome is not Outcome.FAILED
    alike = judge_sequentially(step_figures(1.0, 2000, 2000, compute=1.0), LIMITS, LatencyLooks())
    assert {c.name: c.outcome for c in alike.checks}["compute_increase"] is Outcome.PASSED
    assert alike.settled, alike.waiting


def test_without_execution_times_compute_is_pending_and_never_holds_a_step() -> None:
    judgement = judge_sequentially(step_figures(1.0, 2000, 2000), LIMITS, LatencyLooks())
    compute = next(c for c in judgement.checks if c.name == "compute_increase")
    assert compute.outcome is Outcome.PENDING and compute.settles and "no execution times" in compute.detail
    assert judgement.settled, judgement.waiting
