"""One model's release as the controller holds it: the release, what its current step measured, and
the two things read from that: the step's judgement and the release's status document.

Kept apart from :mod:`.controller`, which decides when to judge and what to do with a judgement;
:mod:`conch.observability.release_metrics` reads the same figures for ``conch_shadow_*``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.release.copy_balance import CopyBalance
from conch.release.expected_agreement import AgreementLimit, agreement_limit, read_expected
from conch.release.gate import GateTracker, Judgement, judged_steps, limits_of
from conch.release.prometheus_judge import (
    DRIFT_SCORE_BUCKETS,
    PrometheusClient,
    PrometheusUnavailableError,
    prometheus_figures,
)
from conch.release.sequential_gate import judge_sequentially
from conch.release.state import Release, ReleaseEvent, ReleaseState
from conch.release.step_figures import StepFigures

log = logging.getLogger(__name__)
#: Answers of each version a release counts but does not time (:class:`StepFigures`): on a loaded
#: 2-core machine a freshly loaded candidate answered about 3 times slower for its first few seconds.
WARMING_ANSWERS = 500
#: Seconds at the start of each step whose answers are counted, not timed (:class:`StepFigures`): an
#: identical candidate read P95 +33% [+22%, +45%] in the first 2 s of a 10% -> 50% switch on a loaded
#: 2-core machine, and was rolled back, while its whole step read within noise.
STEP_SETTLE_S = 5.0


@dataclass
class ModelRelease:
    """One model's release and everything measured for its current step."""

    release: Release
    figures: StepFigures
    tracker: GateTracker
    last_judgement: Judgement | None = None
    #: ``conch_shadow_*`` and ``conch_release_*_total``, over the release's whole life.
    compared: int = 0
    agreements: int = 0
    dropped: int = 0
    rollbacks: int = 0
    drift_buckets: list[int] = field(default_factory=lambda: [0] * (len(DRIFT_SCORE_BUCKETS) + 1))
    drift_sum: float = 0.0
    #: The spec as ``release.yaml`` gave it, to tell a changed file from an unchanged one.
    file_spec: dict[str, Any] | None = None
    #: The release's identity on every replica (:func:`conch.release.verdicts.release_digest`).
    digest: str = ""
    #: Per version, every answer the local gate counts (routed ones and shadow copies) and its server
    #: errors, so that ``judge: prometheus`` counts the same: Triton's ``nv_inference_*`` leave the
    #: copies out, and a dark launch (``weight: 0, shadow: true``) would never reach ``min_requests``.
    answers: Counter[int] = field(default_factory=Counter)
    server_errors: Counter[int] = field(default_factory=Counter)
    #: The release's ``min_agreement`` and where it came from, read when its first step is judged.
    agreement: AgreementLimit | None = None
    #: Shadow copies sent to each version in the step, kept even while both answer clients.
    copies: CopyBalance = field(default_factory=CopyBalance)

    @classmethod
    def of(cls, release: Release, clock: Callable[[], float] = time.monotonic) -> ModelRelease:
        gate = release.spec.gate
        figures = StepFigures(gate.drift_threshold, WARMING_ANSWERS, settling=True, clock=clock)
        return cls(release, figures, GateTracker(gate.failure_threshold))


def settle(held: ModelRelease, now: float) -> None:
    """Time the step's answers from :data:`STEP_SETTLE_S` into it on."""
    if not held.figures.timing and held.release.step_elapsed_s(now) >= STEP_SETTLE_S:
        held.figures.timing = True


def judge_step(model: str, held: ModelRelease, now: float) -> Judgement | None:
    """The gate's judgement of the current step: from the figures counted here (``judge: local``) or
    from Prometheus's over the step so far; None when Prometheus cannot answer (judged next round)."""
    release = held.release
    gate = release.spec.gate
    resolved = held.agreement
    limits = limits_of(
        gate,
        judged_steps(release.spec.steps),
        None if resolved is None else resolved.limit,
        0.0 if resolved is None else resolved.noise,
    )
    if gate.judge == "local":
        tracker = held.tracker
        return judge_sequentially(
            held.figures.snapshot(), limits, tracker.latency_looks, now, tracker.execution_looks
        )
    assert gate.prometheus_url is not None
    elapsed = release.step_elapsed_s(now)
    try:
        figures = prometheus_figures(
            PrometheusClient(gate.prometheus_url),
            model,
            str(release.baseline),
            str(release.spec.candidate),
            max(1.0, elapsed),
            gate.drift_threshold,
            timed_s=elapsed - STEP_SETTLE_S,  # a step's first seconds are counted, not timed
        )
    except PrometheusUnavailableError as exc:
        log.warning("release of '%s': cannot judge now: %s", model, exc.message)
        return None
    return judge_sequentially(figures, limits, held.tracker.latency_looks, now, held.tracker.execution_looks)


def resolve_agreement(held: ModelRelease, model_dir: Path) -> AgreementLimit | None:
    """The release's ``min_agreement``: declared, else from the candidate's recorded expected agreement
    against the baseline, else the default (:mod:`conch.release.expected_agreement`). Read once, when
    the candidate's folder is there; None before."""
    release = held.release
    candidate_dir = model_dir / str(release.spec.candidate)
    if held.agreement is None and (candidate_dir.is_dir() or release.state is not ReleaseState.PENDING):
        held.agreement = agreement_limit(
            release.spec.gate.min_agreement,
            read_expected(candidate_dir),
            release.baseline,
            read_expected(model_dir / str(release.baseline)),
        )
    return held.agreement


def end_inconclusive(release: Release, judgement: Judgement, now: float) -> ReleaseEvent | None:
    """The step's duration is over and its judgement is not settled: the gate's ``on_inconclusive``
    (``pause`` or ``rollback``; ``advance`` is the controller's ordinary move), with the figures that
    kept it open. None while the step runs, or when nothing is left open."""
    step = release.current_step
    if release.state is not ReleaseState.PROGRESSING or step is None:
        return None
    if judgement.settled or judgement.failed:  # a failure waits for failure_threshold, never ends a step
        return None
    if step.duration_s is not None and release.step_elapsed_s(now) < step.duration_s:
        return None
    reason = f"gate inconclusive at the end of step {release.step}: {judgement.waiting}"
    action = release.spec.gate.on_inconclusive
    if action == "rollback":
        return release.rollback(now, reason)
    if action == "pause":
        return release.pause(now, reason)
    return None


def status_of(model: str, held: ModelRelease, now: float) -> dict[str, Any]:
    """``GET /v2/models/{m}/release``'s body for ``held``: state, step, weights, each gate figure with its
    limit, history."""
    release = held.release
    body = release.to_json(now)
    body["model"] = model
    body["candidate"] = release.spec.candidate
    body["weights"] = {str(v): w for v, w in release.weights().items()}
    body["shadow"] = release.shadow
    judgement = held.last_judgement
    body["gate"] = {
        "judge": release.spec.gate.judge,
        "ready": judgement.ready if judgement else False,
        "settled": judgement.settled if judgement else False,
        "waiting": judgement.waiting if judgement else "",
        "consecutive_failures": held.tracker.consecutive_failures,
        "failure_threshold": release.spec.gate.failure_threshold,
        "on_inconclusive": release.spec.gate.on_inconclusive,
        "min_agreement_source": (
            held.agreement.source
            if held.agreement
            else f"read from version {release.spec.candidate}'s metadata.json when it appears"
        ),
        "checks": [check.to_json() for check in (judgement.checks if judgement else ())],
    }
    body["shadow_figures"] = {
        "compared": held.compared,
        "agreements": held.agreements,
        "dropped": held.dropped,
    }
    return body
