"""The quality gate's figures and its judgement: pure rules, no clock, no request, no I/O.

A release step is judged on its own traffic. :class:`~conch.release.step_figures.StepFigures` counts
it as it comes (answers and server errors per version, latencies, shadow comparisons); :func:`judge`
turns a snapshot of those figures, :class:`GateFigures`, into a :class:`Judgement` against
:class:`GateLimits`; :class:`GateTracker` counts consecutive failed judgements up to the release's
``failure_threshold``. With ``judge: prometheus`` the same :class:`GateFigures` come from Prometheus
instead (:mod:`conch.release.prometheus_judge`), so both gates share one set of rules.

A release's steps are judged by sequential tests (:mod:`conch.release.sequential_gate`); :func:`judge`
here reads the point estimates, once, for a fixed set of rows (``conch optimize`` compares an int8
twin so). The four checks, once both versions have ``min_requests`` answers:

- ``error_rate_increase``: candidate's server-error rate minus the baseline's, at most the limit;
- ``p95_increase``: candidate P95 / baseline P95 - 1, at most the limit;
- ``agreement``: share of compared requests whose predictions agree, at least the limit;
- ``drift_fraction``: share of drift-scored requests whose drift is above ``drift_threshold``, at most
  the limit.

Before ``min_requests`` no check can fail: a handful of answers says nothing. A check without data
(no comparison yet, no successful answer to time) is pending, not failed. Latencies go into a
:class:`~conch.release.latency_sketch.LatencySketch` (quantiles within 0.5%).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conch.release.sequential import LatencyHistogram, LatencyLooks
from conch.release.spec import DEFAULT_MIN_AGREEMENT, GateSpec, Step


class Role(enum.StrEnum):
    """Which side of the release answered."""

    BASELINE = "baseline"
    CANDIDATE = "candidate"


@dataclass(frozen=True)
class VersionFigures:
    """One version's answers in the step: how many, how many server errors, and their P95."""

    requests: float
    server_errors: float
    p95_s: float | None
    #: The successful answers' latencies, for the latency test; None where only the P95 is known.
    latency: LatencyHistogram | None = None
    #: The P95 and the counts of the executions that answered them, for the compute check; None
    #: where unknown (Prometheus's judge, a scheduler that reports no execution per answer).
    execution_p95_s: float | None = None
    execution: LatencyHistogram | None = None

    @property
    def error_rate(self) -> float | None:
        """Server errors per answer; None before any answer."""
        return self.server_errors / self.requests if self.requests > 0 else None


@dataclass(frozen=True)
class GateFigures:
    """Everything :func:`judge` reads. Counts are floats because Prometheus's ``increase()`` is.

    ``drift_scored`` counts compared requests that had a float output (so a drift), and ``drifted``
    those whose drift was above the threshold.
    """

    baseline: VersionFigures
    candidate: VersionFigures
    compared: float = 0
    agreements: float = 0
    drift_scored: float = 0
    drifted: float = 0
    #: Log of candidate P95 / baseline P95 in each closed time slice of the step
    #: (:mod:`conch.release.time_slices`); None where the judge does not slice (Prometheus's).
    slice_log_ratios: tuple[float, ...] | None = None
    #: The same for the executions that answered (the compute check).
    execution_slice_log_ratios: tuple[float, ...] | None = None


#: The chance, over a whole release, that the gate rolls back a candidate that keeps every limit (or
#: passes one that breaks a limit): spread over the checks and the judged steps (:func:`limits_of`).
RELEASE_ALPHA = 0.05
CHECKS = ("error_rate_increase", "p95_increase", "compute_increase", "agreement", "drift_fraction")


@dataclass(frozen=True)
class GateLimits:
    """The release spec's ``gate`` limits that :func:`judge` applies; :func:`limits_of` maps a GateSpec.

    ``alpha`` is each check's error over one step (the sequential gate's); ``agreement_noise`` the
    share of requests on which the versions disagree with themselves (prediction noise), subtracted
    from ``min_agreement``.
    """

    min_requests: int
    max_error_rate_increase: float
    max_p95_increase: float
    min_agreement: float
    max_drift_fraction: float
    alpha: float = RELEASE_ALPHA / len(CHECKS)
    agreement_noise: float = 0.0
    max_compute_increase: float = GateSpec.max_compute_increase


def judged_steps(steps: Sequence[Step]) -> int:
    """Steps the gate judges: every weighted step below 100 (a step at 100 has no baseline to judge)."""
    return max(1, sum(1 for step in steps if step.weight is not None and step.weight < 100))


def limits_of(
    gate: GateSpec,
    steps: int = 1,
    min_agreement: float | None = None,
    agreement_noise: float = 0.0,
) -> GateLimits:
    """The limits a spec's gate sets: one mapping for the server's gate and ``conch release gate``, so
    both judge the same figures alike. ``RELEASE_ALPHA`` is shared by the checks of ``steps`` judged
    steps; ``min_agreement`` is the limit the release resolved when the gate leaves it out
    (:mod:`conch.release.expected_agreement`), else the spec's, else the default."""
    limit = gate.min_agreement if gate.min_agreement is not None else min_agreement
    return GateLimits(
        gate.min_requests,
        gate.max_error_rate_increase,
        gate.max_p95_increase,
        DEFAULT_MIN_AGREEMENT if limit is None else limit,
        gate.max_drift_fraction,
        RELEASE_ALPHA / (len(CHECKS) * max(1, steps)),
        agreement_noise,
        gate.max_compute_increase,
    )


class Outcome(enum.StrEnum):
    """A check passed, failed, or could not be judged yet."""

    PASSED = "passed"
    FAILED = "failed"
    PENDING = "pending"


@dataclass(frozen=True)
class Check:
    """One figure against its limit. ``value`` is None when there is no data for it.

    The sequential gate adds the figure's bound (``lower``, ``upper``), its ``noise`` floor where one
    is known, why it is still pending or what proved its failure (``detail``), and whether a pending
    check may still end its step (``settles``: a service figure whose estimate keeps its limit;
    agreement and drift must pass).
    """

    name: str
    value: float | None
    limit: float
    outcome: Outcome
    lower: float | None = None
    upper: float | None = None
    noise: float | None = None
    detail: str = ""
    settles: bool = True

    @property
    def ok(self) -> bool:
        """Not failed: passed or pending."""
        return self.outcome is not Outcome.FAILED

    def to_json(self) -> dict[str, Any]:
        """The check as the release status and ``conch release gate`` show it."""
        return {
            "name": self.name,
            "value": self.value,
            "limit": self.limit,
            "outcome": str(self.outcome),
            "lower": self.lower,
            "upper": self.upper,
            "noise": self.noise,
            "detail": "" if self.outcome is Outcome.PASSED else self.detail,
        }

    def __str__(self) -> str:
        value = "no data" if self.value is None else f"{self.value:.4g}"
        if self.lower is not None and self.upper is not None:
            value += f" [{self.lower:.4g}, {self.upper:.4g}]"
        text = f"{self.name} {value} (limit {self.limit:g}): {self.outcome}"
        return f"{text}, {self.detail}" if self.detail and self.outcome is not Outcome.PASSED else text


@dataclass(frozen=True)
class Judgement:
    """The gate's verdict on a step's figures; ``ready`` once both versions have ``min_requests``."""

    ready: bool
    checks: tuple[Check, ...]

    @property
    def failures(self) -> tuple[Check, ...]:
        """The checks that failed."""
        return tuple(check for check in self.checks if check.outcome is Outcome.FAILED)

    @property
    def failed(self) -> bool:
        """Whether any limit is broken."""
        return bool(self.failures)

    @property
    def reason(self) -> str:
        """The failed checks with their figures, for the release history; empty when none failed."""
        return "; ".join(map(str, self.failures))

    @property
    def unsettled(self) -> tuple[Check, ...]:
        """The checks that keep the step from ending: failed ones, and pending ones that must pass."""
        return tuple(
            check
            for check in self.checks
            if check.outcome is Outcome.FAILED or (check.outcome is Outcome.PENDING and not check.settles)
        )

    @property
    def settled(self) -> bool:
        """Whether the step may end: ``ready``, and no check failed or is pending that must pass."""
        return self.ready and not self.unsettled

    @property
    def waiting(self) -> str:
        """Why the step may not end yet, for the release history; empty when settled."""
        if self.settled:
            return ""
        if not self.ready:
            return "each version needs min_requests answers in the step"
        return "; ".join(map(str, self.unsettled))


def _check(name: str, value: float | None, limit: float, broken: bool, ready: bool) -> Check:
    if value is None or not ready:
        return Check(name, value, limit, Outcome.PENDING)
    return Check(name, value, limit, Outcome.FAILED if broken else Outcome.PASSED)


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def judge(figures: GateFigures, limits: GateLimits) -> Judgement:
    """Judge a step's figures against the limits; limits are inclusive (a figure at its limit passes)."""
    base, cand = figures.baseline, figures.candidate
    ready = min(base.requests, cand.requests) >= limits.min_requests
    error_increase = (
        cand.error_rate - base.error_rate
        if cand.error_rate is not None and base.error_rate is not None
        else None
    )
    p95_increase = (
        cand.p95_s / base.p95_s - 1 if cand.p95_s is not None and base.p95_s else None
    )  # no baseline P95 (every answer an error) is no data, not an infinite rise
    compute_increase = (
        cand.execution_p95_s / base.execution_p95_s - 1
        if cand.execution_p95_s is not None and base.execution_p95_s
        else None
    )
    agreement = _ratio(figures.agreements, figures.compared)
    drift_fraction = _ratio(figures.drifted, figures.drift_scored)
    checks = (
        _check(
            "error_rate_increase",
            error_increase,
            limits.max_error_rate_increase,
            error_increase is not None and error_increase > limits.max_error_rate_increase,
            ready,
        ),
        _check(
            "p95_increase",
            p95_increase,
            limits.max_p95_increase,
            p95_increase is not None and p95_increase > limits.max_p95_increase,
            ready,
        ),
        _check(
            "compute_increase",
            compute_increase,
            limits.max_compute_increase,
            compute_increase is not None and compute_increase > limits.max_compute_increase,
            ready,
        ),
        _check(
            "agreement",
            agreement,
            limits.min_agreement,
            agreement is not None and agreement < limits.min_agreement,
            ready,
        ),
        _check(
            "drift_fraction",
            drift_fraction,
            limits.max_drift_fraction,
            drift_fraction is not None and drift_fraction > limits.max_drift_fraction,
            ready,
        ),
    )
    return Judgement(ready=ready, checks=checks)


#: Seconds the latency test must have found the candidate slower, look after look, before it fails:
#: an identical candidate read slower 6 s into a served 50% step on a loaded 2-core machine (the
#: version whose share rose still queued) and was rolled back on one look and its confirmation 0.3 s
#: later; a slower model stays slower over any span.
LATENCY_HOLD_S = 10.0


class GateTracker:
    """Counts consecutive failed judgements; ``failure_threshold`` of them trigger ``on_failure``.

    A judgement without a failure starts the count again. A failure counts whether or not the step
    has ``min_requests`` yet: the sequential gate's bounds hold at any count.
    """

    def __init__(self, failure_threshold: int) -> None:
        self.failure_threshold = failure_threshold
        self.consecutive_failures = 0
        self.last_failure: Judgement | None = None
        #: The step's latency and compute looks (:mod:`conch.release.sequential_gate`).
        self.latency_looks = LatencyLooks(needed=failure_threshold, hold_s=LATENCY_HOLD_S)
        self.execution_looks = LatencyLooks(needed=failure_threshold, hold_s=LATENCY_HOLD_S)

    def observe(self, judgement: Judgement) -> bool:
        """Count one judgement; True when the threshold is reached."""
        if judgement.failed:
            self.consecutive_failures += 1
            self.last_failure = judgement
        else:
            self.consecutive_failures = 0
        return self.threshold_reached

    @property
    def threshold_reached(self) -> bool:
        """Whether ``failure_threshold`` consecutive judgements failed."""
        return self.consecutive_failures >= self.failure_threshold

    def reset(self) -> None:
        """A new step starts with no failure counted and no latency look."""
        self.consecutive_failures = 0
        self.last_failure = None
        self.latency_looks = LatencyLooks(needed=self.failure_threshold, hold_s=LATENCY_HOLD_S)
        self.execution_looks = LatencyLooks(needed=self.failure_threshold, hold_s=LATENCY_HOLD_S)
