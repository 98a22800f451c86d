"""The metric families each ``--workers`` process owns, merged into the one page the supervisor serves.

A worker holds its own contract counts, freshness, stream consumer, circuit breakers, fallbacks,
release figures, answer codes and custom metrics. The supervisor asks every worker for them at each
scrape and merges them the way Prometheus itself would aggregate replicas:

- counters and histograms (every ``_bucket``, ``_sum`` and ``_count``) are summed by label set, so a
  rate over the page equals the sum of the workers' rates;
- gauges keep one series per worker, labelled ``worker``, because no single rule fits them all: a
  stream's lag is the same figure in every worker of one consumer group (take the max), a circuit's
  state is per worker (any open one matters), a custom gauge means what its model says.
  Dashboards and alerts already aggregate gauges across replicas with ``max by``/``sum by``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

WORKER_LABEL = "worker"


def own_families(collectors: Iterable[Collector]) -> list[Metric]:
    """One collection of ``collectors``, as the families a worker hands the supervisor."""
    return [family for collector in collectors for family in collector.collect()]


def merge_families(per_worker: Sequence[Sequence[Metric]]) -> list[Metric]:
    """The families of every worker (in worker order) merged into one list, in first-seen order."""
    merged: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for index, families in enumerate(per_worker):
        for family in families:
            if family.name not in merged:
                merged[family.name] = copy.copy(family)
                merged[family.name].samples = []
                sums[family.name] = {}
            if family.type == "gauge":
                merged[family.name].samples.extend(_per_worker(family.samples, index))
            else:
                _add(sums[family.name], family.samples)
    for name, added in sums.items():
        merged[name].samples.extend(added.values())
    return list(merged.values())


class MergedFamilies(Collector):
    """A collector yielding the families that ``families`` returns at the moment of the scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families()


def _per_worker(samples: Iterable[Sample], index: int) -> Iterator[Sample]:
    for sample in samples:
        yield sample._replace(labels={**sample.labels, WORKER_LABEL: str(index)}, exemplar=None)


def _add(into: dict[tuple[str, tuple[tuple[str, str], ...]], Sample], samples: Iterable[Sample]) -> None:
    for sample in samples:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        found = into.get(key)
        if found is None:
            into[key] = sample._replace(exemplar=None, timestamp=None)
        elif sample.name.endswith("_created"):  # when the series began: the earliest worker's
            into[key] = found._replace(value=min(found.value, sample.value))
        else:
            into[key] = found._replace(value=found.value + sample.value)
