"""Per model-version inference statistics in the shape of Triton's statistics extension.

Counters are plain integers updated on the event loop thread, so recording costs a few additions;
the Prometheus collector reads the same objects at scrape time instead of keeping its own copies.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from conch.core.types import ExecutionTiming


@dataclass(slots=True)
class Duration:
    """A count and a total in nanoseconds, as Triton's ``StatisticDuration``."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}

    def add_from(self, other: Duration) -> None:
        self.add(other.ns, other.count)


#: Latency buckets in seconds, from 100 us (a tiny model) to 10 s (an overloaded queue).
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    """Cumulative-bucket histogram: one ``bisect`` and two additions per observation."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add_from(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus expects them, ending with ``+Inf``."""
        total, buckets = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            total += count
            buckets.append((bound, total))
        return buckets


@dataclass(slots=True)
class BatchStatistics:
    """Compute times of executions that ran a batch of one size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)

    def add_from(self, other: BatchStatistics) -> None:
        self.compute_input.add_from(other.compute_input)
        self.compute_infer.add_from(other.compute_infer)
        self.compute_output.add_from(other.compute_output)


@dataclass
class ModelStatistics:
    """Everything Triton reports for one model version."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStatistics] = field(default_factory=dict)
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    gpu_fallback_instances: int = 0
    request_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    queue_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    batch_sizes: Histogram = field(default_factory=lambda: Histogram(BATCH_SIZE_BUCKETS))

    def add(self, other: ModelStatistics) -> None:
        """Add another worker's figures for the same model version to these."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if isinstance(mine, Duration | Histogram):
                mine.add_from(theirs)
            elif isinstance(mine, int) and item.name != "last_inference_ms":
                setattr(self, item.name, mine + theirs)
        self.last_inference_ms = max(self.last_inference_ms, other.last_inference_ms)
        for reason, count in other.failures_by_reason.items():
            self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + count
        for size, batch in other.batches.items():
            self.batches.setdefault(size, BatchStatistics()).add_from(batch)

    def record_execution(self, batch_size: int, requests: int, timing: ExecutionTiming) -> None:
        """One model execution that served ``requests`` requests totalling ``batch_size`` rows."""
        self.execution_count += 1
        self.inference_count += batch_size
        self.batch_sizes.observe(batch_size)
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStatistics()
        for total, per_batch, ns in (
            (self.compute_input, batch.compute_input, timing.compute_input_ns),
            (self.compute_infer, batch.compute_infer, timing.compute_infer_ns),
            (self.compute_output, batch.compute_output, timing.compute_output_ns),
        ):
            total.add(ns * requests, requests)  # as Triton: each request is charged its batch's time
            per_batch.add(ns)

    def record_success(self, request_ns: int, queue_ns: int) -> None:
        """One request answered, ``request_ns`` end to end of which ``queue_ns`` waiting."""
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.request_seconds.observe(request_ns / 1e9)
        self.queue_seconds.observe(queue_ns / 1e9)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, request_ns: int, reason: str) -> None:
        """One request that failed; ``reason`` is Triton's label (REJECTED, BACKEND, OTHER...)."""
        self.fail.add(request_ns)
        self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def to_json(self) -> dict[str, Any]:
        """Triton's ``ModelStatistics`` JSON object."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": Duration().to_json(),
                "cache_miss": Duration().to_json(),
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.to_json(),
                    "compute_infer": stats.compute_infer.to_json(),
                    "compute_output": stats.compute_output.to_json(),
                }
                for size, stats in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }


def merge_statistics(groups: Iterable[Iterable[ModelStatistics]]) -> list[ModelStatistics]:
    """One :class:`ModelStatistics` per model version, summed over the groups (one per worker)."""
    merged: dict[tuple[str, str], ModelStatistics] = {}
    for group in groups:
        for stats in group:
            total = merged.get((stats.name, stats.version))
            if total is None:
                merged[(stats.name, stats.version)] = total = ModelStatistics(stats.name, stats.version)
            total.add(stats)
    return list(merged.values())
