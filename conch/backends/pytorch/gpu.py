"""The GPUs a PyTorch model's instances run on: that they exist, and the cap on PyTorch's memory there.

PyTorch caps its caching allocator per process and per device
(``torch.cuda.set_per_process_memory_fraction``), not per model: two models on one GPU share one cap.
So conch keeps the smallest cap any loaded model asked for on each GPU, and a model that asks for
less lowers it for all; the neighbours a cap protects are other processes on the same GPU. An
allocation beyond the cap raises CUDA's out-of-memory error, which the instance turns into a 500
naming the GPU, and which the ``CPU`` fallback takes over when the strategy has it.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType

from conch.backends.pytorch.options import MemoryCap
from conch.core.errors import UnavailableError
from conch.observability.events import emit
from conch.observability.gpu_allocator_metrics import watch_gpu

log = logging.getLogger(__name__)

_lock = threading.Lock()
#: GPU index -> the fraction PyTorch's allocator is capped at there now.
_caps: dict[int, float] = {}


def check_devices(torch: ModuleType, gpus: list[int], model: str) -> None:
    """Every GPU index exists on this machine (Triton refuses a config that names one that does not)."""
    count = torch.cuda.device_count()
    absent = [gpu for gpu in gpus if not 0 <= gpu < count]
    if absent:
        raise UnavailableError(
            f"model '{model}' asks for GPU(s) {absent} but this machine has {count} GPU(s) "
            f"(0..{count - 1}): fix instance_group's gpus"
        )


def prepare_gpus(torch: ModuleType, gpus: list[int], cap: MemoryCap | None, model: str) -> None:
    """Apply ``cap`` on each of ``gpus`` (the smallest one asked stays) and export their allocators."""
    for gpu in gpus:
        if cap is not None:
            fraction = cap.fraction_of(int(torch.cuda.get_device_properties(gpu).total_memory))
            with _lock:
                current = _caps.get(gpu, 1.0)
                if fraction < current:
                    torch.cuda.set_per_process_memory_fraction(fraction, gpu)
                    _caps[gpu] = fraction
            emit(
                log,
                "gpu_memory_cap",
                model=model,
                gpu=gpu,
                fraction=round(min(fraction, current), 4),
                asked=str(cap),
            )
        watch_gpu(gpu)
