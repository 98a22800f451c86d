"""Host and GPU gauges under Triton's names: CPU utilisation and memory, GPU utilisation and memory.

GPU figures come from NVML (``nvidia-ml-py``) when a driver and a device are visible; without them
the GPU families are simply absent, as in Triton on a CPU-only machine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psutil
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency, but keep the server up without it
    pynvml = None


class HostCollector(Collector):
    """``nv_cpu_*`` always; ``nv_gpu_*`` per device when NVML answers."""

    def __init__(self) -> None:
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement window
        self._gpus = _open_gpus()

    def collect(self) -> Iterator[Metric]:
        memory = psutil.virtual_memory()
        yield _gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", psutil.cpu_percent() / 100)
        yield _gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", memory.total)
        yield _gauge(
            "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", memory.total - memory.available
        )
        if not self._gpus:
            return
        utilization = GaugeMetricFamily(
            "nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", labels=["gpu_uuid"]
        )
        total = GaugeMetricFamily(
            "nv_gpu_memory_total_bytes", "GPU total memory, in bytes", labels=["gpu_uuid"]
        )
        used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", labels=["gpu_uuid"])
        for uuid, handle in self._gpus:
            try:
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            except pynvml.NVMLError as exc:
                log.warning("NVML could not read GPU %s: %s", uuid, exc)
                continue
            utilization.add_metric([uuid], rates.gpu / 100)
            total.add_metric([uuid], info.total)
            used.add_metric([uuid], info.used)
        yield from (utilization, total, used)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _open_gpus() -> list[tuple[str, object]]:
    if pynvml is None:
        return []
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        return [(str(pynvml.nvmlDeviceGetUUID(h)), h) for h in handles]
    except pynvml.NVMLError:
        return []
