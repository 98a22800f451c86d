"""The release gate's judgement of a step: each figure by its sequential test, so that looking every
second costs no more error than looking once.

Each check has three outcomes: **failed** when its bound says the candidate breaks the limit,
**passed** when it says the candidate keeps it, **pending** otherwise (keep collecting). The bounds
are always valid (:mod:`conch.release.sequential`), so a failure may come at any answer count: a
shuffled-label candidate is rolled back after a dozen comparisons, not after ``min_requests``. Passing
needs ``min_requests`` answers of each version too.

When the step's duration is over, the controller ends it only if the judgement is settled: agreement and
drift must have passed (they are what no other gate measures), while the service figures (server
errors, latency) may be pending if their estimate keeps the limit: proving an error rate below 1% with
no errors takes over 600 answers a version, more than a small canary gets. An unsettled step goes to
the gate's ``on_inconclusive``.

The latency test runs at looks (:func:`~conch.release.sequential.latency_look`) and its verdict holds
until the next one; :class:`~conch.release.sequential.LatencyLooks` keeps it for the step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from conch.release.gate import Check, GateFigures, GateLimits, Judgement, Outcome
from conch.release.sequential import (
    FIRST_LATENCY_LOOK,
    LatencyHistogram,
    LatencyLooks,
    Verdict,
    compare_latency,
    latency_look,
    latency_verdict,
    look_alpha,
    rate_bound,
    rate_verdict,
)
from conch.release.time_slices import MIN_SLICES, slice_noise

_OUTCOME = {Verdict.WITHIN: Outcome.PASSED, Verdict.BEYOND: Outcome.FAILED, Verdict.UNSURE: Outcome.PENDING}


def judge_sequentially(
    figures: GateFigures,
    limits: GateLimits,
    looks: LatencyLooks,
    now: float = 0.0,
    execution_looks: LatencyLooks | None = None,
) -> Judgement:
    """Every check of a step by its sequential test, at ``limits.alpha`` each (see the module), at
    time ``now`` (seconds, for how long the latency test has found the candidate slower).
    ``looks`` and ``execution_looks`` keep the latency and compute tests' looks between calls."""
    base, cand = figures.baseline, figures.candidate
    ready = min(base.requests, cand.requests) >= limits.min_requests
    execution_looks = LatencyLooks() if execution_looks is None else execution_looks
    checks: tuple[Check, ...] = (
        _error_rate(figures, limits),
        _latency(figures, limits, looks, now),
        _compute(figures, limits, execution_looks, now),
        _agreement(figures, limits),
        _drift(figures, limits),
    )
    if not ready:  # a pass needs min_requests of each version; a failure needs none
        wanted = limits.min_requests
        detail = f"{min(base.requests, cand.requests):.0f} of {wanted} answers of each version"
        checks = tuple(_hold(c, detail) if c.outcome is Outcome.PASSED else c for c in checks)
    return Judgement(ready=ready, checks=checks)


def _hold(check: Check, detail: str) -> Check:
    """A passed check held pending until ``min_requests``."""
    return dataclasses.replace(check, outcome=Outcome.PENDING, detail=detail)


def _agreement(figures: GateFigures, limits: GateLimits) -> Check:
    limit = max(0.0, limits.min_agreement - limits.agreement_noise)
    rate = (figures.agreements, figures.compared, "compared")
    return _rate_check("agreement", rate, limit, limits.alpha, limits.agreement_noise, settles=False)


def _drift(figures: GateFigures, limits: GateLimits) -> Check:
    no_data = figures.drift_scored <= 0 and figures.compared > 0  # no float output to score
    rate = (figures.drifted, figures.drift_scored, "scored")
    return _rate_check("drift_fraction", rate, limits.max_drift_fraction, limits.alpha, None, settles=no_data)


def _rate_check(
    name: str, rate: tuple[float, float, str], limit: float, alpha: float, noise: float | None, settles: bool
) -> Check:
    """A share of ``events`` in ``trials`` against ``limit`` (at least it for agreement, at most for
    drift), judged by its confidence sequence; pending says how many ``noun`` so far."""
    events, trials, noun = rate
    bound = rate_bound(events, trials, alpha)
    verdict = rate_verdict(events, trials, limit, alpha, at_least=name == "agreement")
    detail = f"{trials:.0f} {noun}, bound straddles {limit:g}" if verdict == Verdict.UNSURE else ""
    return Check(
        name,
        bound.estimate,
        limit,
        _OUTCOME[verdict],
        bound.lower,
        bound.upper,
        noise,
        detail,
        settles=settles,
    )


def _error_rate(figures: GateFigures, limits: GateLimits) -> Check:
    """Candidate rate - baseline rate: failed when the candidate's lower bound is above the baseline's
    upper one by more than the limit; passed when the candidate's upper bound is within the limit of
    the baseline's lower one; each rate's bound at half the check's alpha."""
    limit = limits.max_error_rate_increase
    base, cand = figures.baseline, figures.candidate
    half = limits.alpha / 2
    b = rate_bound(base.server_errors, base.requests, half)
    c = rate_bound(cand.server_errors, cand.requests, half)
    if b.estimate is None or c.estimate is None:
        return Check("error_rate_increase", None, limit, Outcome.PENDING, detail="no answer yet")
    low, high = c.lower - b.upper, c.upper - b.lower
    estimate = c.estimate - b.estimate
    outcome = Outcome.FAILED if low > limit else Outcome.PASSED if high <= limit else Outcome.PENDING
    detail = f"{cand.requests:.0f} and {base.requests:.0f} answers, bound straddles {limit:g}"
    detail = detail if outcome is Outcome.PENDING else ""
    return Check(
        "error_rate_increase",
        estimate,
        limit,
        outcome,
        low,
        high,
        None,
        detail,
        settles=estimate <= limit,
    )


@dataclass(frozen=True)
class _Timings:
    """What the latency test reads of one kind of timing: the check's name, both versions' P95s and
    counts, the limit, and the log P95 ratio of each time slice (None: the judge does not slice)."""

    name: str
    base_p95: float | None
    cand_p95: float | None
    base: LatencyHistogram | None
    cand: LatencyHistogram | None
    limit: float
    sliced: tuple[float, ...] | None
    missing: str


def _latency(figures: GateFigures, limits: GateLimits, looks: LatencyLooks, now: float) -> Check:
    """Candidate P95 / baseline P95 - 1 of the answers' latencies (each the time its version spent)."""
    base, cand = figures.baseline, figures.candidate
    timings = _Timings(
        "p95_increase",
        base.p95_s,
        cand.p95_s,
        base.latency,
        cand.latency,
        limits.max_p95_increase,
        figures.slice_log_ratios,
        "no latency samples",
    )
    return _timed(timings, limits.alpha, looks, now)


def _compute(figures: GateFigures, limits: GateLimits, looks: LatencyLooks, now: float) -> Check:
    """Candidate P95 / baseline P95 - 1 of the executions that answered, by the same test as latency.

    Why a check of its own: while both versions answer clients they take turns in one line, and on a
    saturated 2-core server the frontends' and the loop's share of a request's time is shared by both
    versions too. A candidate computing twice as long per execution then answered only 1.05x to 1.23x
    slower at P95, while its clients alone would have seen 1.2x to 1.47x and lost a third of the
    throughput; its executions read 2x."""
    base, cand = figures.baseline, figures.candidate
    timings = _Timings(
        "compute_increase",
        base.execution_p95_s,
        cand.execution_p95_s,
        base.execution,
        cand.execution,
        limits.max_compute_increase,
        figures.execution_slice_log_ratios,
        "no execution times yet (sequence and ensemble models and judge: prometheus report none)",
    )
    return _timed(timings, limits.alpha, looks, now)


def _timed(timings: _Timings, alpha: float, looks: LatencyLooks, now: float) -> Check:
    """A P95 ratio tested at each look; without histograms (only P95s known) the point estimate is
    shown and the check settles if it keeps the limit."""
    name, limit = timings.name, timings.limit
    base, cand = timings.base, timings.cand
    estimate = (
        timings.cand_p95 / timings.base_p95 - 1 if timings.cand_p95 is not None and timings.base_p95 else None
    )
    keeps = estimate is None or estimate <= limit
    if base is None or cand is None:
        return Check(name, estimate, limit, Outcome.PENDING, detail=timings.missing, settles=keeps)
    look = latency_look(min(base.total, cand.total))
    if look == 0:
        detail = f"{min(base.total, cand.total):.0f} of {FIRST_LATENCY_LOOK} timed answers"
        return Check(name, estimate, limit, Outcome.PENDING, detail=detail, settles=keeps)
    if look > looks.look:
        sliced = timings.sliced
        noise_between = None if sliced is None else slice_noise(sliced)
        slices = None if sliced is None else len(sliced)
        look_at = look_alpha(alpha, look)
        compared = compare_latency(base, cand, look_at, limit, look, noise_between, slices)
        looks.look = look
        if compared is not None:
            looks.comparison, looks.verdict = compared, latency_verdict(compared, limit)
            slower = looks.verdict == Verdict.BEYOND
            looks.beyond = looks.beyond + 1 if slower else 0
            looks.slower_since = (
                (now if looks.slower_since is None else looks.slower_since) if slower else None
            )
    found = looks.comparison
    if found is None:
        return Check(name, estimate, limit, Outcome.PENDING, detail="too few timed answers", settles=keeps)
    lower, upper = math.exp(found.log_ratio - found.bound) - 1, math.exp(found.log_ratio + found.bound) - 1
    outcome = _OUTCOME[looks.verdict]
    held = 0.0 if looks.slower_since is None else now - looks.slower_since
    if outcome is Outcome.FAILED and found.slices is not None and found.slices < MIN_SLICES:
        outcome = Outcome.PENDING
        detail = f"slower at look {looks.look}, in {found.slices} of {MIN_SLICES} time slices so far"
    elif outcome is Outcome.FAILED and (looks.beyond < looks.needed or held < looks.hold_s):
        outcome = Outcome.PENDING
        detail = (
            f"slower at look {looks.look} ({looks.beyond} of {looks.needed} in a row, for {held:.0f} of "
            f"{looks.hold_s:g} s): later looks confirm or clear it"
        )
    elif outcome is Outcome.FAILED and lower <= limit:  # the rank test proved it, not the P95
        detail = (
            f"every time {1 + limit:g}x longer still ranks above the baseline's: "
            f"P(slower) {0.5 + found.rank_excess:.3g} > 0.5 + {found.rank_bound:.2g}"
        )
    else:
        detail = f"look {looks.look}, bound straddles {limit:g}" if outcome is Outcome.PENDING else ""
    return Check(
        name,
        found.increase,
        limit,
        outcome,
        lower,
        upper,
        math.exp(found.noise) - 1,
        detail,
        settles=found.increase <= limit,
    )
