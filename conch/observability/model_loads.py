"""Model loads as figures: how long each load took and whether it succeeded.

Why: a model's cold-start time (files read, sessions created, warm-up run) decides how fast a new
replica takes traffic and how long a hot swap builds aside, and a load that fails is what a release
dashboard alerts on. Whoever loads a model calls :func:`record_load` once per model load, beside the
event it emits (:func:`conch.observability.events.emit`), so the loader never knows Prometheus.

The figures live in one process-wide :class:`ModelLoadMetrics`, because a metrics registry is made
per :func:`conch.observability.metrics.create_registry` call while loads happen wherever the server
loads; :class:`ModelLoadCollector` reads them at scrape time.

A backend that can tell where a load's time went also records its phases
(``conch_model_load_phase_duration_seconds{model,phase}``): ``context`` (the program read and placed
on its devices, the CUDA context started) and ``warmup`` (the warm-up runs on every instance). A GPU
model's cold start is mostly the second, and that is the part a config's warm-up samples change.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conch.observability.statistics import Histogram

#: Load times range from a tiny ONNX graph (tens of milliseconds) to a large model with a long
#: warm-up (minutes), so the buckets run from 50 ms to 5 minutes.
LOAD_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass
class ModelLoadFigures:
    """One model's loads so far."""

    seconds: Histogram = field(default_factory=lambda: Histogram(LOAD_BUCKETS_S))
    successes: int = 0
    failures: int = 0
    #: Phase name -> its durations, for the backends that record phases.
    phases: dict[str, Histogram] = field(default_factory=dict)


class ModelLoadMetrics:
    """Every model's load figures, safe to update from a loading thread while a scrape reads them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[str, ModelLoadFigures] = {}

    def record(self, model: str, seconds: float, succeeded: bool) -> None:
        with self._lock:
            figures = self._figures.setdefault(model, ModelLoadFigures())
            figures.seconds.observe(seconds)
            if succeeded:
                figures.successes += 1
            else:
                figures.failures += 1

    def record_phase(self, model: str, phase: str, seconds: float) -> None:
        with self._lock:
            figures = self._figures.setdefault(model, ModelLoadFigures())
            figures.phases.setdefault(phase, Histogram(LOAD_BUCKETS_S)).observe(seconds)

    def snapshot(self) -> dict[str, ModelLoadFigures]:
        """A copy by model name, so a scrape reads figures no load changes under it."""
        with self._lock:
            copies = {}
            for model, figures in self._figures.items():
                seconds = Histogram(LOAD_BUCKETS_S)
                seconds.add_from(figures.seconds)
                phases = {}
                for phase, histogram in figures.phases.items():
                    phases[phase] = Histogram(LOAD_BUCKETS_S)
                    phases[phase].add_from(histogram)
                copies[model] = ModelLoadFigures(seconds, figures.successes, figures.failures, phases)
            return copies


#: The server process's loads; :func:`record_load` adds to it and every registry exposes it.
MODEL_LOADS = ModelLoadMetrics()


def record_load(model: str, seconds: float, succeeded: bool) -> None:
    """Count one load of ``model`` (all its versions) that took ``seconds``; ``succeeded``: at least one
    version became READY."""
    MODEL_LOADS.record(model, seconds, succeeded)


def record_load_phase(model: str, phase: str, seconds: float) -> None:
    """Count ``seconds`` of one version's load of ``model`` spent in ``phase`` (``context``, ``warmup``)."""
    MODEL_LOADS.record_phase(model, phase, seconds)


class ModelLoadCollector(Collector):
    """``conch_model_load_duration_seconds{model}``, ``conch_model_loads_total{model,result}`` and
    ``conch_model_load_phase_duration_seconds{model,phase}``."""

    def __init__(self, loads: ModelLoadMetrics = MODEL_LOADS) -> None:
        self._loads = loads

    def collect(self) -> Iterator[Metric]:
        durations = HistogramMetricFamily(
            "conch_model_load_duration_seconds",
            "Time to load a model: its versions' sessions created and warm-up run",
            labels=["model"],
        )
        loads = CounterMetricFamily(
            "conch_model_loads", "Model loads, by result (success or failure)", labels=["model", "result"]
        )
        phases = HistogramMetricFamily(
            "conch_model_load_phase_duration_seconds",
            "Time of one phase of a model version's load: context (program read and placed) or warmup",
            labels=["model", "phase"],
        )
        for model, figures in sorted(self._loads.snapshot().items()):
            if figures.successes or figures.failures:
                durations.add_metric([model], figures.seconds.cumulative(), figures.seconds.sum)
                loads.add_metric([model, "success"], figures.successes)
                loads.add_metric([model, "failure"], figures.failures)
            for phase, histogram in sorted(figures.phases.items()):
                phases.add_metric([model, phase], histogram.cumulative(), histogram.sum)
        yield from (durations, loads)
        if phases.samples:
            yield phases
