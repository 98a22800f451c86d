"""``gate.judge: prometheus``: the gate's figures from Prometheus, summed over every replica.

Each replica applies the same release spec, but a local gate sees only its own share of the traffic.
When every replica runs the same queries against the same Prometheus, they all read the same
:class:`~conch.release.gate.GateFigures` and reach the same :func:`~conch.release.gate.judge`ment
without talking to each other. The queries read what conch already exports:

- answers: ``conch_release_answers_total`` and ``conch_release_server_errors_total``, counted from
  the same answers as the local gate: routed ones and shadow copies, without client errors. Triton's
  ``nv_inference_request_*`` count routed answers only, so in a dark launch (``weight: 0, shadow:
  true``) the candidate would never reach ``min_requests`` and the step could never end;
- latency: the bucket counts of ``conch_inference_request_duration_seconds`` over the window, the
  routed answers only (a dark launch's candidate has none, a pending check), and the P95 that
  ``histogram_quantile`` reads from them. The sequential gate runs the same test on these buckets as
  on the local sketch's (:func:`~conch.release.sequential.compare_latency`: the P95 interpolated
  linearly inside its bucket, the noise from random splits of the baseline's counts). Its resolution
  is one bucket: they are a factor 2 to 2.5 apart, so a P95 inside one bucket moves only as far as
  the interpolation moves it. A doubling shows plainly; a rise near 20% is read on interpolation;
- shadow comparisons: ``conch_shadow_compared_total``, ``conch_shadow_agreements_total`` and the
  ``conch_shadow_drift_score`` histogram, all labelled by ``model``. A request drifts when its score
  is above ``drift_threshold``: it is counted as the histogram's count minus its cumulative bucket at
  the largest bound not above the threshold. Give the histogram :data:`DRIFT_SCORE_BUCKETS` so the
  usual thresholds are bounds; a threshold between bounds counts more requests as drifting, never
  fewer.

Counts use ``increase()`` over the step's window, so they are floats (Prometheus extrapolates to the
window's edges) and survive a replica's restart (a counter reset).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from conch.core.errors import UnavailableError
from conch.release.gate import GateFigures, Role, VersionFigures
from conch.release.sequential import LatencyHistogram

#: Bucket bounds for ``conch_shadow_drift_score``: every 0.05 up to 1 (so thresholds like 0.3 are
#: exact), finer near 0 where equivalent models sit, and up to 2, the largest cosine distance.
DRIFT_SCORE_BUCKETS: tuple[float, ...] = (
    0.001,
    0.01,
    0.025,
    *(round(0.05 * step, 2) for step in range(1, 21)),
    1.25,
    1.5,
    1.75,
    2.0,
)

Sample = Mapping[str, Any]


class PrometheusUnavailableError(UnavailableError):
    """Prometheus did not answer a query: the gate cannot judge now (this is not a failed check)."""


def _label(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _selector(**labels: str) -> str:
    return "{" + ",".join(f"{name}={_label(value)}" for name, value in labels.items()) + "}"


def prometheus_queries(
    model: str, baseline: str, candidate: str, window_s: float, timed_s: float | None = None
) -> dict[str, str]:
    """The PromQL that gives one step's figures, keyed as :func:`figures_from_prometheus` reads them.

    ``window_s`` is the part of the step to judge, usually the time since the step started; ``timed_s``
    (default: all of it) the last part of it whose latencies count, as the local gate leaves a step's
    first seconds untimed. Below one second, no latency is asked for (the gate's latency check waits).
    """
    window = _range(window_s)
    timed = window if timed_s is None else _range(timed_s) if timed_s >= 1.0 else None
    queries: dict[str, str] = {}
    for role, version in ((Role.BASELINE, baseline), (Role.CANDIDATE, candidate)):
        answers = _selector(model=model, version=version)
        queries[f"{role}_answers"] = f"sum(increase(conch_release_answers_total{answers}{window}))"
        queries[f"{role}_server_errors"] = (
            f"sum(increase(conch_release_server_errors_total{answers}{window}))"
        )
        if timed is None:
            continue
        queries[f"{role}_p95"] = (
            "histogram_quantile(0.95, sum by (le) "
            f"(rate(conch_inference_request_duration_seconds_bucket{answers}{timed})))"
        )
        queries[f"{role}_latency"] = (
            f"sum by (le) (increase(conch_inference_request_duration_seconds_bucket{answers}{timed}))"
        )
    shadow = _selector(model=model)
    queries["compared"] = f"sum(increase(conch_shadow_compared_total{shadow}{window}))"
    queries["agreements"] = f"sum(increase(conch_shadow_agreements_total{shadow}{window}))"
    queries["drift_scored"] = f"sum(increase(conch_shadow_drift_score_count{shadow}{window}))"
    queries["drift_buckets"] = f"sum by (le) (increase(conch_shadow_drift_score_bucket{shadow}{window}))"
    return queries


def _range(seconds: float) -> str:
    return f"[{max(1, round(seconds * 1000))}ms]"  # PromQL durations are whole numbers of a unit


def _value(sample: Sample) -> float:
    return float(sample["value"][1])  # [unix time, "text"]; the text may be "NaN" or "+Inf"


def _count(result: list[Sample]) -> float:
    """A ``sum(...)`` result: one sample, or none when no series matched (nothing happened)."""
    total = sum(_value(sample) for sample in result)
    return total if math.isfinite(total) else 0.0


def _quantile(result: list[Sample]) -> float | None:
    """A ``histogram_quantile`` result: NaN or nothing when no request finished in the window."""
    values = [_value(sample) for sample in result]
    return values[0] if values and math.isfinite(values[0]) else None


def _drifted(buckets: list[Sample], scored: float, threshold: float) -> float:
    """Scored requests above ``threshold``: all those not in the largest bucket not above it."""
    bounds = {float(sample["metric"]["le"]): _value(sample) for sample in buckets}
    within = [bound for bound in bounds if bound <= threshold]
    at_or_below = bounds[max(within)] if within else 0.0
    return max(scored - (at_or_below if math.isfinite(at_or_below) else 0.0), 0.0)


def _histogram(buckets: list[Sample]) -> LatencyHistogram | None:
    """A ``sum by (le) (increase(..._bucket))`` result as per-bucket counts; None without buckets."""
    cumulative = sorted((float(sample["metric"]["le"]), _value(sample)) for sample in buckets)
    if not cumulative:
        return None
    counts, before = [], 0.0
    for _, total in cumulative:
        total = total if math.isfinite(total) else before
        counts.append(max(total - before, 0.0))
        before = max(total, before)
    return LatencyHistogram(0.0, tuple(bound for bound, _ in cumulative), tuple(counts))


def figures_from_prometheus(answers: Mapping[str, list[Sample]], drift_threshold: float) -> GateFigures:
    """Turn each query's ``data.result`` (keyed as :func:`prometheus_queries`) into the gate's figures;
    the latency buckets go to the gate only when both versions have the same ones."""
    latency = {role: _histogram(answers.get(f"{role}_latency", [])) for role in Role}
    bounds = {None if found is None else found.bounds for found in latency.values()}
    comparable = len(bounds) == 1 and None not in bounds

    def version(role: Role) -> VersionFigures:
        return VersionFigures(
            requests=_count(answers[f"{role}_answers"]),
            server_errors=_count(answers[f"{role}_server_errors"]),
            p95_s=_quantile(answers.get(f"{role}_p95", [])),
            latency=latency[role] if comparable else None,
        )

    scored = _count(answers["drift_scored"])
    return GateFigures(
        baseline=version(Role.BASELINE),
        candidate=version(Role.CANDIDATE),
        compared=_count(answers["compared"]),
        agreements=_count(answers["agreements"]),
        drift_scored=scored,
        drifted=_drifted(answers["drift_buckets"], scored, drift_threshold),
    )


class PrometheusClient:
    """Instant queries against Prometheus's HTTP API (``GET /api/v1/query``)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """The instant vector's samples, evaluated now or at ``at`` (Unix seconds)."""
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:  # Prometheus explains a bad query in its JSON body
            answer = _error_body(exc)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
            raise PrometheusUnavailableError(f"Prometheus at {self.url} did not answer: {reason}") from None
        if answer.get("status") != "success" or answer.get("data", {}).get("resultType") != "vector":
            reason = answer.get("error", "not an instant vector")
            raise PrometheusUnavailableError(f"Prometheus at {self.url} refused '{promql}': {reason}")
        result: list[Sample] = answer["data"]["result"]
        return result


def _error_body(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        body: dict[str, Any] = json.load(exc)
    except ValueError:
        body = {"error": f"HTTP {exc.code}"}
    return body


def prometheus_figures(
    client: PrometheusClient,
    model: str,
    baseline: str,
    candidate: str,
    window_s: float,
    drift_threshold: float,
    at: float | None = None,
    timed_s: float | None = None,
) -> GateFigures:
    """Run every query at the same instant (``at``, default now) and read the gate's figures."""
    instant = time.time() if at is None else at
    queries = prometheus_queries(model, baseline, candidate, window_s, timed_s)
    answers = {key: client.query(promql, instant) for key, promql in queries.items()}
    return figures_from_prometheus(answers, drift_threshold)
