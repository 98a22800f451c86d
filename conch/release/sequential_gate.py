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

from conch.release.gate import Check, GateFigures, GateLimits, Judgement, Outcome
from conch.release.sequential import (
    FIRST_LATENCY_LOOK,
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
    figures: GateFigures, limits: GateLimits, looks: LatencyLooks, now: float = 0.0
) -> Judgement:
    """Every check of a step by its sequential test, at ``limits.alpha`` each (see the module), at
    time ``now`` (seconds, for how long the latency test has found the candidate slower)."""
    base, cand = figures.baseline, figures.candidate
    ready = min(base.requests, cand.requests) >= limits.min_requests
    checks: tuple[Check, ...] = (
        _error_rate(figures, limits),
        _latency(figures, limits, looks, now),
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


def _latency(figures: GateFigures, limits: GateLimits, looks: LatencyLooks, now: float) -> Check:
    """Candidate P95 / baseline P95 - 1, tested at each look; without histograms (only P95s known) the
    point estimate is shown and the check settles if it keeps the limit."""
    limit = limits.max_p95_increase
    base, cand = figures.baseline, figures.candidate
    if base.latency is None or cand.latency is None:
        value = cand.p95_s / base.p95_s - 1 if cand.p95_s is not None and base.p95_s else None
        settles = value is None or value <= limit
        return Check(
            "p95_increase", value, limit, Outcome.PENDING, detail="no latency samples", settles=settles
        )
    estimate = cand.p95_s / base.p95_s - 1 if cand.p95_s is not None and base.p95_s else None
    look = latency_look(min(base.latency.total, cand.latency.total))
    if look == 0:
        detail = f"{min(base.latency.total, cand.latency.total):.0f} of {FIRST_LATENCY_LOOK} timed answers"
        keeps = estimate is None or estimate <= limit
        return Check("p95_increase", estimate, limit, Outcome.PENDING, detail=detail, settles=keeps)
    if look > looks.look:
        alpha = look_alpha(limits.alpha, look)
        sliced = figures.slice_log_ratios
        noise_between = None if sliced is None else slice_noise(sliced)
        slices = None if sliced is None else len(sliced)
        compared = compare_latency(base.latency, cand.latency, alpha, limit, look, noise_between, slices)
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
        keeps = estimate is None or estimate <= limit
        return Check(
            "p95_increase", estimate, limit, Outcome.PENDING, detail="too few timed answers", settles=keeps
        )
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
            f"every latency {1 + limit:g}x slower still ranks above the baseline's: "
            f"P(slower) {0.5 + found.rank_excess:.3g} > 0.5 + {found.rank_bound:.2g}"
        )
    else:
        detail = f"look {looks.look}, bound straddles {limit:g}" if outcome is Outcome.PENDING else ""
    return Check(
        "p95_increase",
        found.increase,
        limit,
        outcome,
        lower,
        upper,
        math.exp(found.noise) - 1,
        detail,
        settles=found.increase <= limit,
    )
