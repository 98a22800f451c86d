"""One model's release as the controller holds it: the release, what its current step measured, and
the two things read from that: the step's judgement and the release's status document.

Kept apart from :mod:`.controller`, which decides when to judge and what to do with a judgement;
:mod:`conch.observability.release_metrics` reads the same figures for ``conch_shadow_*``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from conch.release.gate import GateTracker, Judgement, StepFigures, judge, limits_of
from conch.release.prometheus_judge import (
    DRIFT_SCORE_BUCKETS,
    PrometheusClient,
    PrometheusUnavailableError,
    prometheus_figures,
)
from conch.release.state import Release

log = logging.getLogger(__name__)


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
    #: Per version, every answer the local gate counts (routed ones and shadow copies) and its server
    #: errors, so that ``judge: prometheus`` counts the same: Triton's ``nv_inference_*`` leave the
    #: copies out, and a dark launch (``weight: 0, shadow: true``) would never reach ``min_requests``.
    answers: Counter[int] = field(default_factory=Counter)
    server_errors: Counter[int] = field(default_factory=Counter)

    @classmethod
    def of(cls, release: Release) -> ModelRelease:
        gate = release.spec.gate
        return cls(release, StepFigures(gate.drift_threshold), GateTracker(gate.failure_threshold))


def judge_step(model: str, held: ModelRelease, now: float) -> Judgement | None:
    """The gate's judgement of the current step: from the figures counted here (``judge: local``) or
    from Prometheus's over the step so far; None when Prometheus cannot answer (judged next round)."""
    gate = held.release.spec.gate
    limits = limits_of(gate)
    if gate.judge == "local":
        return judge(held.figures.snapshot(), limits)
    assert gate.prometheus_url is not None
    window = max(1.0, held.release.step_elapsed_s(now))
    try:
        figures = prometheus_figures(
            PrometheusClient(gate.prometheus_url),
            model,
            str(held.release.baseline),
            str(held.release.spec.candidate),
            window,
            gate.drift_threshold,
        )
    except PrometheusUnavailableError as exc:
        log.warning("release of '%s': cannot judge now: %s", model, exc.message)
        return None
    return judge(figures, limits)


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
        "consecutive_failures": held.tracker.consecutive_failures,
        "failure_threshold": release.spec.gate.failure_threshold,
        "checks": [
            {"name": c.name, "value": c.value, "limit": c.limit, "outcome": str(c.outcome)}
            for c in (judgement.checks if judgement else ())
        ],
    }
    body["shadow_figures"] = {
        "compared": held.compared,
        "agreements": held.agreements,
        "dropped": held.dropped,
    }
    return body
