"""PyTorch's CUDA caching allocator as metrics: reserved against allocated bytes, fragmentation, retries.

Why: the guide's GPU ran out of memory at 65% use. NVML's "used" (``nv_gpu_memory_used_bytes``)
counts what the allocator reserved from the driver, not what tensors hold; when many reserved blocks
are partly free and none fits a new tensor, the allocator frees its cache and retries (a retry is
a full synchronisation and costs milliseconds), then fails. These figures show it coming:

- ``conch_gpu_memory_reserved_bytes{gpu}`` and ``conch_gpu_memory_allocated_bytes{gpu}``;
- ``conch_gpu_memory_fragmentation_ratio{gpu}``: 1 - allocated / reserved, the share of reserved
  memory no tensor uses (0 when nothing is reserved);
- ``conch_gpu_allocation_retries_total{gpu}``: ``num_alloc_retries``, the allocator's cache flushes.

They come from ``torch.cuda.memory_stats`` at scrape time, only for the GPUs a loaded PyTorch model
uses (:func:`watch_gpu`): a server without GPU models shows none of these families.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_lock = threading.Lock()
_watched: set[int] = set()


def watch_gpu(gpu: int) -> None:
    """Export the allocator figures of GPU ``gpu`` from now on (a PyTorch model placed an instance there)."""
    with _lock:
        _watched.add(gpu)


def watched_gpus() -> list[int]:
    with _lock:
        return sorted(_watched)


@dataclass(frozen=True)
class AllocatorFigures:
    """One GPU's allocator at one moment."""

    reserved_bytes: int
    allocated_bytes: int
    retries: int

    @property
    def fragmentation_ratio(self) -> float:
        """The share of reserved memory that no tensor holds."""
        if self.reserved_bytes <= 0:
            return 0.0
        return max(0.0, 1.0 - self.allocated_bytes / self.reserved_bytes)


def allocator_figures(stats: Mapping[str, int | float]) -> AllocatorFigures:
    """The figures in a ``torch.cuda.memory_stats`` dict (keys absent before the first allocation)."""
    return AllocatorFigures(
        reserved_bytes=int(stats.get("reserved_bytes.all.current", 0)),
        allocated_bytes=int(stats.get("allocated_bytes.all.current", 0)),
        retries=int(stats.get("num_alloc_retries", 0)),
    )


class GpuAllocatorCollector(Collector):
    """The four families, one sample per watched GPU; nothing while no GPU is watched."""

    def collect(self) -> Iterator[Metric]:
        gpus = watched_gpus()
        torch = sys.modules.get("torch")  # watched GPUs mean a PyTorch model imported it
        if not gpus or torch is None:
            return
        reserved = GaugeMetricFamily(
            "conch_gpu_memory_reserved_bytes",
            "Bytes PyTorch's caching allocator holds from the driver on the GPU",
            labels=["gpu"],
        )
        allocated = GaugeMetricFamily(
            "conch_gpu_memory_allocated_bytes", "Bytes tensors hold on the GPU", labels=["gpu"]
        )
        fragmentation = GaugeMetricFamily(
            "conch_gpu_memory_fragmentation_ratio",
            "1 - allocated / reserved: the share of reserved GPU memory no tensor uses",
            labels=["gpu"],
        )
        retries = CounterMetricFamily(
            "conch_gpu_allocation_retries",
            "Allocations that failed, flushed the allocator's cache and were retried",
            labels=["gpu"],
        )
        for gpu in gpus:
            figures = allocator_figures(torch.cuda.memory_stats(gpu))
            label = [str(gpu)]
            reserved.add_metric(label, figures.reserved_bytes)
            allocated.add_metric(label, figures.allocated_bytes)
            fragmentation.add_metric(label, figures.fragmentation_ratio)
            retries.add_metric(label, figures.retries)
        yield from (reserved, allocated, fragmentation, retries)
