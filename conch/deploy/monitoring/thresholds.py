"""The alerts' thresholds: the golden signals' defaults from the production guide, each one a flag of
``conch deploy monitoring``.

Why one table: the defaults, the flags, their help texts and the runbook's figures must agree, so each
threshold is declared once here (:data:`THRESHOLD_FLAGS`) and the CLI and the alert rules read it.
Durations are Prometheus durations (``5m``, ``1h``), written into the rules as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from conch.core.errors import InvalidArgumentError

_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


@dataclass(frozen=True)
class AlertThresholds:
    """When each alert fires. Latencies in milliseconds, ratios between 0 and 1."""

    p95_ms: float = 150.0
    p99_ms: float = 200.0
    latency_for: str = "5m"
    failure_ratio: float = 0.05
    failure_for: str = "5m"
    traffic_drop_ratio: float = 0.30
    traffic_for: str = "30m"
    not_ready_for: str = "5m"
    fallback_for: str = "5m"
    circuit_open_for: str = "1m"
    rollback_window: str = "15m"
    queue_ms: float = 50.0
    queue_rise_factor: float = 2.0
    queue_for: str = "10m"
    gpu_memory_ratio: float = 0.90
    gpu_memory_for: str = "5m"
    gpu_fragmentation_ratio: float = 0.50
    gpu_fragmentation_for: str = "10m"
    stream_lag_entries: float = 1000.0
    stream_lag_for: str = "10m"
    dead_letter_window: str = "15m"
    broker_down_for: str = "2m"
    contract_violation_rate: float = 0.05
    contract_violation_for: str = "10m"
    out_of_range_ratio: float = 0.05
    out_of_range_for: str = "15m"


@dataclass(frozen=True)
class ThresholdFlag:
    """One command-line flag of ``conch deploy monitoring`` and the threshold it sets."""

    flag: str
    field: str
    help: str


THRESHOLD_FLAGS = (
    ThresholdFlag("--p95-ms", "p95_ms", "alert when a version's P95 latency is above this (default 150)"),
    ThresholdFlag("--p99-ms", "p99_ms", "alert when a version's P99 latency is above this (default 200)"),
    ThresholdFlag("--latency-for", "latency_for", "how long latency stays high before it alerts (5m)"),
    ThresholdFlag("--failure-ratio", "failure_ratio", "alert above this share of failed requests (0.05)"),
    ThresholdFlag("--failure-for", "failure_for", "how long failures stay high before they alert (5m)"),
    ThresholdFlag(
        "--traffic-drop-ratio",
        "traffic_drop_ratio",
        "alert when traffic is down this much day over day (0.30)",
    ),
    ThresholdFlag("--traffic-for", "traffic_for", "how long traffic stays down before it alerts (30m)"),
    ThresholdFlag("--not-ready-for", "not_ready_for", "how long a version may be not READY (5m)"),
    ThresholdFlag("--fallback-for", "fallback_for", "how long fallbacks may answer before it alerts (5m)"),
    ThresholdFlag("--circuit-open-for", "circuit_open_for", "how long a circuit may stay open (1m)"),
    ThresholdFlag("--rollback-window", "rollback_window", "how long a rollback keeps its alert firing (15m)"),
    ThresholdFlag("--queue-ms", "queue_ms", "mean queue time above which rising queue time alerts (50)"),
    ThresholdFlag(
        "--queue-rise-factor", "queue_rise_factor", "queue time this many times its last hour's mean (2)"
    ),
    ThresholdFlag("--queue-for", "queue_for", "how long queue time stays risen before it alerts (10m)"),
    ThresholdFlag(
        "--gpu-memory-ratio", "gpu_memory_ratio", "alert above this share of GPU memory used (0.90)"
    ),
    ThresholdFlag("--gpu-memory-for", "gpu_memory_for", "how long GPU memory stays that full (5m)"),
    ThresholdFlag(
        "--gpu-fragmentation-ratio",
        "gpu_fragmentation_ratio",
        "alert above this share of the allocator's reserved GPU memory unallocated (0.50)",
    ),
    ThresholdFlag(
        "--gpu-fragmentation-for", "gpu_fragmentation_for", "how long fragmentation and retries last (10m)"
    ),
    ThresholdFlag(
        "--stream-lag-entries",
        "stream_lag_entries",
        "alert when a stream's lag is above this and rising (1000)",
    ),
    ThresholdFlag(
        "--stream-lag-for", "stream_lag_for", "how long the lag keeps rising before it alerts (10m)"
    ),
    ThresholdFlag(
        "--dead-letter-window", "dead_letter_window", "how long a dead letter keeps its alert firing (15m)"
    ),
    ThresholdFlag("--broker-down-for", "broker_down_for", "how long no replica may reach the broker (2m)"),
    ThresholdFlag(
        "--contract-violation-rate",
        "contract_violation_rate",
        "alert above this many inputs per second refused by a contract, per field and rule (0.05)",
    ),
    ThresholdFlag(
        "--contract-violation-for", "contract_violation_for", "how long refusals stay above it (10m)"
    ),
    ThresholdFlag(
        "--out-of-range-ratio",
        "out_of_range_ratio",
        "alert above this share of a field's values outside the training range (0.05)",
    ),
    ThresholdFlag("--out-of-range-for", "out_of_range_for", "how long the share stays above it (15m)"),
)


def thresholds_from(values: dict[str, Any]) -> AlertThresholds:
    """Thresholds from ``{field: value}`` (None keeps the default), each checked: durations must be
    Prometheus durations, ratios between 0 and 1, milliseconds and factors above 0."""
    given = {name: value for name, value in values.items() if value is not None}
    thresholds = replace(AlertThresholds(), **given)
    for each in fields(AlertThresholds):
        value = getattr(thresholds, each.name)
        flag = _flag_of(each.name)
        if each.type == "str":
            if not _DURATION.match(value):
                raise InvalidArgumentError(
                    f"{flag} {value!r} is not a Prometheus duration: write a number and a unit, e.g. 5m or 1h"
                )
        elif each.name.endswith("_ratio"):
            if not 0 < value < 1:
                raise InvalidArgumentError(f"{flag} {value:g} must be between 0 and 1, e.g. 0.05 for 5%")
        elif value <= 0:
            raise InvalidArgumentError(f"{flag} {value:g} must be above 0")
    return thresholds


def _flag_of(field_name: str) -> str:
    return next(flag.flag for flag in THRESHOLD_FLAGS if flag.field == field_name)
