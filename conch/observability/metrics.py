"""Prometheus metrics under Triton's names, read from the statistics at scrape time, and conch's own
model figures (readiness, loads).

A collector turns :class:`ModelStatistics` into ``nv_inference_*`` families when Prometheus scrapes,
so serving a request updates plain integers and nothing else. Serve the registry with
:func:`conch.observability.exposition.metrics_app`, which writes Triton's counters without ``_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conch.observability.contract_metrics import ContractCollector
from conch.observability.exposition import TritonCounter
from conch.observability.gpu_allocator_metrics import GpuAllocatorCollector
from conch.observability.host_metrics import HostCollector
from conch.observability.model_loads import ModelLoadCollector
from conch.observability.statistics import Duration, Histogram, ModelStatistics

_LABELS = ["model", "version"]
_DURATIONS: list[tuple[str, str, Callable[[ModelStatistics], Duration]]] = [
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds",
        lambda s: s.success,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds",
        lambda s: s.queue,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds",
        lambda s: s.compute_input,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds",
        lambda s: s.compute_infer,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds",
        lambda s: s.compute_output,
    ),
]


class InferenceStatisticsCollector(Collector):
    """Exposes every model version's statistics as Triton's counters."""

    def __init__(self, statistics: Callable[[], Iterable[ModelStatistics]]) -> None:
        self._statistics = statistics

    def collect(self) -> Iterator[Metric]:
        success = TritonCounter(
            "nv_inference_request_success", "Number of successful inference requests", labels=_LABELS
        )
        failure = TritonCounter(
            "nv_inference_request_failure", "Number of failed inference requests", labels=[*_LABELS, "reason"]
        )
        count = TritonCounter("nv_inference_count", "Number of inferences performed", labels=_LABELS)
        executions = TritonCounter(
            "nv_inference_exec_count", "Number of model executions performed", labels=_LABELS
        )
        durations = [TritonCounter(name, doc, labels=_LABELS) for name, doc, _ in _DURATIONS]
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count", "Instantaneous number of pending requests", labels=_LABELS
        )
        fallback = GaugeMetricFamily(
            "conch_gpu_fallback_instances",
            "Instances configured KIND_GPU that run on the CPU because no CUDA provider is available",
            labels=_LABELS,
        )
        for stats in self._statistics():
            labels = [stats.name, stats.version]
            success.add_metric(labels, stats.success.count)
            for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
                failure.add_metric([*labels, reason], stats.failures_by_reason.get(reason, 0))
            count.add_metric(labels, stats.inference_count)
            executions.add_metric(labels, stats.execution_count)
            for family, (_, _, pick) in zip(durations, _DURATIONS, strict=True):
                family.add_metric(labels, pick(stats).ns // 1000)
            pending.add_metric(labels, stats.pending)
            fallback.add_metric(labels, stats.gpu_fallback_instances)
        yield from (success, failure, count, executions, *durations, pending, fallback)
        yield from self._histograms()

    def _histograms(self) -> Iterator[Metric]:
        families: list[tuple[str, str, Callable[[ModelStatistics], Histogram]]] = [
            (
                "conch_inference_request_duration_seconds",
                "End-to-end time of successful requests",
                lambda s: s.request_seconds,
            ),
            (
                "conch_inference_queue_duration_seconds",
                "Time requests waited before execution",
                lambda s: s.queue_seconds,
            ),
            ("conch_inference_batch_size", "Rows per model execution", lambda s: s.batch_sizes),
        ]
        for name, documentation, pick in families:
            family = HistogramMetricFamily(name, documentation, labels=_LABELS)
            for stats in self._statistics():
                histogram = pick(stats)
                family.add_metric([stats.name, stats.version], histogram.cumulative(), histogram.sum)
            yield family


#: The index's reason for a model or version unloaded on purpose (Triton's word).
UNLOADED_ON_PURPOSE = "unloaded"


class ModelReadinessCollector(Collector):
    """``conch_model_ready{model,version}``: 1 for each READY version of the repository index, else 0.

    A model whose config failed has no versions; its index entry comes out with ``version=""``. What
    was unloaded on purpose (a model unloaded through the repository API, a version its policy retired:
    Triton's reason "unloaded") is left out: it is not a model that should be ready and is not, and an
    alert on ``conch_model_ready == 0`` must not fire for it.
    """

    def __init__(self, index: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._index = index

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily(
            "conch_model_ready", "Whether a model version is READY (1) or not (0)", labels=_LABELS
        )
        for entry in self._index():
            if entry["state"] != "READY" and entry.get("reason") == UNLOADED_ON_PURPOSE:
                continue
            ready.add_metric([entry["name"], entry["version"]], 1 if entry["state"] == "READY" else 0)
        yield ready


def create_registry(
    statistics: Callable[[], Iterable[ModelStatistics]],
    index: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    more: Iterable[Collector] = (),
) -> CollectorRegistry:
    """A registry with the inference statistics, host gauges, the process's own figures
    (:func:`process_collectors`) and its CPU and memory."""
    return _registry(statistics, process_collectors(index, more))


def supervisor_registry(
    statistics: Callable[[], Iterable[ModelStatistics]], workers: Collector
) -> CollectorRegistry:
    """The ``--workers`` supervisor's registry: the summed statistics and ``workers``' merged families
    (:mod:`conch.observability.worker_families`) in place of its own."""
    return _registry(statistics, [workers])


def process_collectors(
    index: Callable[[], Iterable[Mapping[str, Any]]] | None = None, more: Iterable[Collector] = ()
) -> list[Collector]:
    """The families a serving process owns: model loads, contracts, ``more`` (circuit breakers,
    fallbacks, releases, streams...), GPU allocators; with ``index`` (the repository index, read at
    each scrape) also each version's readiness."""
    readiness: list[Collector] = [] if index is None else [ModelReadinessCollector(index)]
    return [*readiness, ModelLoadCollector(), ContractCollector(), *more, GpuAllocatorCollector()]


def _registry(
    statistics: Callable[[], Iterable[ModelStatistics]], own: Iterable[Collector]
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InferenceStatisticsCollector(statistics))
    for collector in own:
        registry.register(collector)
    registry.register(HostCollector())
    ProcessCollector(registry=registry)
    return registry
