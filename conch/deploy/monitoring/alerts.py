"""The golden-signal alerts and conch's own, as Prometheus alerting rules.

Each alert is a *signal* (a PromQL expression over what conch exports, one series per model version,
model or GPU) and a *condition* on it; the rule is ``signal condition``. The signal is kept apart so
the tests can evaluate it against a real Prometheus scraping a real server, where the condition is
usually false (no alert fires on healthy traffic) but the signal must still have samples.

Why these metrics: latency comes from ``conch_inference_request_duration_seconds`` (successful
requests, as Triton's ``nv_inference_request_duration_us``), failures and traffic from Triton's
``nv_inference_request_success`` / ``_failure`` counters, readiness, fallbacks, circuits and releases
from conch's own families (``docs/metrics.md``), GPU memory from NVML's ``nv_gpu_*`` gauges and the
PyTorch allocator's ``conch_gpu_memory_*`` gauges. Traffic is compared per model, across versions,
because a release moves traffic between versions from one day to the next. Every selector carries
the rules' label matchers (``--selector``, default ``job="conch"``): Triton exports the same ``nv_*``
names, and its series must not raise conch's alerts.
"""

from __future__ import annotations

import re
from typing import Any

from conch.core.errors import InvalidArgumentError
from conch.deploy.monitoring.alert_rule import Alert, Metrics, number
from conch.deploy.monitoring.data_alerts import data_layer_alerts
from conch.deploy.monitoring.thresholds import AlertThresholds

#: Where ``docs/runbooks.md`` is read; an alert's ``runbook_url`` is this plus ``#`` and its anchor.
DEFAULT_RUNBOOK_BASE = "docs/runbooks.md"
GROUP_NAME = "conch.golden-signals"


DEFAULT_THRESHOLDS = AlertThresholds()
#: The label matchers every selector carries: conch's scrape job in the plain rules file (a
#: ServiceMonitor's job is its Service's name), so no other server's ``nv_*`` series (Triton's) alert.
DEFAULT_SELECTOR = 'job="conch"'
_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"'
_MATCHERS = re.compile(rf"\s*{_MATCHER}(\s*,\s*{_MATCHER})*\s*")


def check_selector(selector: str) -> str:
    """``selector`` if it is PromQL label matchers (``job="conch", namespace="ml"``), else an error."""
    if not _MATCHERS.fullmatch(selector):
        raise InvalidArgumentError(
            f"--selector {selector!r} is not PromQL label matchers: write them as in a selector's braces, "
            'e.g. job="conch", namespace="ml"'
        )
    return selector


def alerts(t: AlertThresholds = DEFAULT_THRESHOLDS, selector: str = DEFAULT_SELECTOR) -> list[Alert]:
    """Every alert, with ``t``'s thresholds, each metric selected with ``selector``'s label matchers."""
    m = Metrics(check_selector(selector))
    failures = f"sum by (model, version) (rate({m('nv_inference_request_failure')}[5m]))"
    successes = f"sum by (model, version) (rate({m('nv_inference_request_success')}[5m]))"
    queue_now, queue_hour = m.mean_queue_seconds("5m"), m.mean_queue_seconds("1h")
    version = "{{ $labels.model }} version {{ $labels.version }}"
    golden = [
        Alert(
            "ConchTargetDown",
            m("up"),
            "== 0",
            "5m",
            "critical",
            "conch target {{ $labels.instance }} is down",
            "Prometheus has not been able to scrape {{ $labels.instance }} (job {{ $labels.job }}) for "
            "5 minutes: the server is down, restarting or unreachable, and no other alert can see it.",
        ),
        Alert(
            "ConchLatencyP95High",
            m.latency(0.95),
            f"> {number(t.p95_ms / 1000)}",
            t.latency_for,
            "warning",
            f"P95 latency of {version} is above {number(t.p95_ms)} ms",
            f"95% of {version}'s successful requests took up to {{{{ $value | humanizeDuration }}}} over "
            f"the last 5 minutes, above {number(t.p95_ms)} ms for {t.latency_for}.",
        ),
        Alert(
            "ConchLatencyP99High",
            m.latency(0.99),
            f"> {number(t.p99_ms / 1000)}",
            t.latency_for,
            "warning",
            f"P99 latency of {version} is above {number(t.p99_ms)} ms",
            f"99% of {version}'s successful requests took up to {{{{ $value | humanizeDuration }}}} over "
            f"the last 5 minutes, above {number(t.p99_ms)} ms for {t.latency_for}.",
        ),
        Alert(
            "ConchFailureRateHigh",
            f"{failures} / ({failures} + {successes})",
            f"> {number(t.failure_ratio)}",
            t.failure_for,
            "critical",
            f"{version} fails more than {number(t.failure_ratio * 100)}% of requests",
            f"{{{{ $value | humanizePercentage }}}} of {version}'s requests failed over the last 5 "
            f"minutes (all reasons: REJECTED, BACKEND, CANCELED).",
        ),
        Alert(
            "ConchTrafficDropped",
            f"{m.requests()} / {m.requests(' offset 1d')}",
            f"< {number(1 - t.traffic_drop_ratio)}",
            t.traffic_for,
            "warning",
            f"Traffic to {{{{ $labels.model }}}} is down more than {number(t.traffic_drop_ratio * 100)}% "
            "day over day",
            "{{ $labels.model }} received {{ $value | humanizePercentage }} of the requests per second "
            "it received at the same hour yesterday (1 hour windows).",
        ),
        Alert(
            "ConchModelNotReady",
            m("conch_model_ready"),
            "== 0",
            t.not_ready_for,
            "critical",
            f"{version} is not READY",
            f"{version} has not been READY for {t.not_ready_for} (LOADING, UNLOADING or UNAVAILABLE; "
            'version "" is a model whose config failed).',
        ),
        Alert(
            "ConchFallbackActive",
            f"sum by (model, version, level, reason) (rate({m('conch_fallback_total')}[5m]))",
            "> 0",
            t.fallback_for,
            "warning",
            f"{{{{ $labels.level }}}} fallback answers for {version}",
            "A {{ $labels.level }} fallback has answered {{ $value | humanize }} requests per second "
            f"for {{{{ $labels.model }}}} (reason {{{{ $labels.reason }}}}) for {t.fallback_for}: "
            "the served version cannot answer.",
        ),
        Alert(
            "ConchCircuitOpen",
            m("conch_circuit_state"),
            "> 0",
            t.circuit_open_for,
            "critical",
            f"The circuit of {version} is open",
            f"{version}'s circuit breaker has not been closed for {t.circuit_open_for} "
            "(state {{ $value }}: 1 open, 2 half-open): its requests fail fast or go to a fallback.",
        ),
        Alert(
            "ConchReleaseRolledBack",
            f"sum by (model) (increase({m('conch_release_rollbacks_total')}[{t.rollback_window}]))",
            "> 0",
            None,
            "warning",
            "The release of {{ $labels.model }} was rolled back",
            "A release of {{ $labels.model }} was rolled back in the last "
            f"{t.rollback_window}: the baseline serves everything again.",
        ),
        Alert(
            "ConchModelVersionRejected",
            f"max by (model, version) ({m('conch_model_version_rejected')})",
            "> 0",
            None,
            "warning",
            "Version {{ $labels.version }} of {{ $labels.model }} is rejected",
            "A release rolled back version {{ $labels.version }} of {{ $labels.model }}: no replica serves "
            "it until someone runs `conch release readmit {{ $labels.model }} {{ $labels.version }}`.",
        ),
        Alert(
            "ConchQueueTimeRising",
            queue_now,
            f"> {number(t.queue_ms / 1000)} and {queue_now} > {number(t.queue_rise_factor)} * {queue_hour}",
            t.queue_for,
            "warning",
            f"Queue time of {version} is rising",
            f"{version}'s requests waited {{{{ $value | humanizeDuration }}}} on average over the last "
            f"5 minutes, above {number(t.queue_ms)} ms and {number(t.queue_rise_factor)} times the "
            "last hour's mean.",
        ),
        Alert(
            "ConchGpuMemoryHigh",
            f"{m('nv_gpu_memory_used_bytes')} / {m('nv_gpu_memory_total_bytes')}",
            f"> {number(t.gpu_memory_ratio)}",
            t.gpu_memory_for,
            "warning",
            f"GPU {{{{ $labels.gpu_uuid }}}} memory is more than {number(t.gpu_memory_ratio * 100)}% used",
            "GPU {{ $labels.gpu_uuid }} has {{ $value | humanizePercentage }} of its memory in use "
            f"for {t.gpu_memory_for}.",
        ),
        Alert(
            "ConchGpuFragmentation",
            m("conch_gpu_memory_fragmentation_ratio"),
            f"> {number(t.gpu_fragmentation_ratio)} and on (instance, gpu) "
            f"increase({m('conch_gpu_allocation_retries_total')}[{t.gpu_fragmentation_for}]) > 0",
            t.gpu_fragmentation_for,
            "warning",
            "The PyTorch allocator on GPU {{ $labels.gpu }} is fragmented",
            "{{ $value | humanizePercentage }} of the memory PyTorch's allocator reserved on GPU "
            "{{ $labels.gpu }} is not allocated to tensors, and the allocator has had to free its cache "
            f"and retry allocations, for {t.gpu_fragmentation_for}.",
        ),
    ]
    return golden + data_layer_alerts(t, m)


def rule(alert: Alert, runbook_base: str = DEFAULT_RUNBOOK_BASE) -> dict[str, Any]:
    """One alerting rule as Prometheus's rule files and the PrometheusRule spec write it."""
    written: dict[str, Any] = {"alert": alert.name, "expr": alert.expr}
    if alert.for_ is not None:
        written["for"] = alert.for_
    written["labels"] = {"severity": alert.severity}
    written["annotations"] = {
        "summary": alert.summary,
        "description": alert.description,
        "runbook_url": f"{runbook_base}#{alert.anchor}",
    }
    return written


def rule_groups(
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    selector: str = DEFAULT_SELECTOR,
) -> dict[str, Any]:
    """``{"groups": [...]}``: a Prometheus rules file (``promtool check rules``) and, as it is, the
    ``spec`` of a PrometheusRule."""
    return {
        "groups": [
            {
                "name": GROUP_NAME,
                "rules": [rule(alert, runbook_base) for alert in alerts(thresholds, selector)],
            }
        ]
    }
