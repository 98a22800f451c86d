"""A PyTorch model's own settings, from its config's ``parameters``, checked before anything loads.

- ``precision``: ``fp32`` (default) or ``fp16``. With ``fp16`` the weights are cast to half and the
  floating-point inputs are cast on the device, after the copy: clients still send the config's
  datatype (FP32), and floating-point outputs are cast back to it before the one copy to the host.
- ``memory_format``: ``contiguous`` (default) or ``channels_last``, for convolutional networks whose
  kernels are faster in NHWC (tensor cores); it applies to the weights and to every 4-d input.
- ``gpu_memory_fraction`` (0 < f <= 1) or ``gpu_memory_limit_bytes`` (> 0): the cap of PyTorch's
  allocator on each GPU the model's instances use (``torch.cuda.set_per_process_memory_fraction``).
- ``INTRA_OP_THREAD_COUNT``: Triton's key for PyTorch's CPU threads (``torch.set_num_threads``).

Values are checked on every machine, GPU or not, so a typo fails the load where it is written rather
than on the first GPU machine it reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError

PRECISIONS = ("fp32", "fp16")
MEMORY_FORMATS = ("contiguous", "channels_last")


@dataclass(frozen=True)
class MemoryCap:
    """At most ``fraction`` of a GPU's memory, or at most ``limit_bytes`` of it."""

    fraction: float | None = None
    limit_bytes: int | None = None

    def fraction_of(self, total_bytes: int) -> float:
        """The fraction to give PyTorch on a GPU of ``total_bytes``."""
        if self.fraction is not None:
            return self.fraction
        assert self.limit_bytes is not None
        if self.limit_bytes > total_bytes:
            raise InvalidArgumentError(
                f"gpu_memory_limit_bytes {self.limit_bytes} is more than the GPU's {total_bytes} bytes: "
                "lower it, or use gpu_memory_fraction"
            )
        return self.limit_bytes / total_bytes

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"gpu_memory_fraction {self.fraction}"
        return f"gpu_memory_limit_bytes {self.limit_bytes}"


@dataclass(frozen=True)
class PyTorchOptions:
    """What the config's ``parameters`` ask of the PyTorch backend."""

    half: bool = False
    channels_last: bool = False
    memory_cap: MemoryCap | None = None
    intra_op_threads: int | None = None


def options_from_config(config: mc.ModelConfig) -> PyTorchOptions:
    """The model's settings; a value out of range or of the wrong kind is a load error saying which."""
    params = {key: value.string_value for key, value in config.parameters.items()}
    precision = params.get("precision", "fp32").strip().lower()
    if precision not in PRECISIONS:
        raise InvalidArgumentError(
            f"parameters 'precision' must be one of {list(PRECISIONS)}, got '{precision}'"
        )
    memory_format = params.get("memory_format", "contiguous").strip().lower()
    if memory_format not in MEMORY_FORMATS:
        raise InvalidArgumentError(
            f"parameters 'memory_format' must be one of {list(MEMORY_FORMATS)}, got '{memory_format}'"
        )
    threads = params.get("INTRA_OP_THREAD_COUNT")
    return PyTorchOptions(
        half=precision == "fp16",
        channels_last=memory_format == "channels_last",
        memory_cap=memory_cap(params),
        intra_op_threads=None if threads is None else _positive_int("INTRA_OP_THREAD_COUNT", threads),
    )


def memory_cap(params: dict[str, str]) -> MemoryCap | None:
    """``gpu_memory_fraction`` or ``gpu_memory_limit_bytes`` (not both), checked."""
    fraction, limit = params.get("gpu_memory_fraction"), params.get("gpu_memory_limit_bytes")
    if fraction is not None and limit is not None:
        raise InvalidArgumentError(
            "parameters 'gpu_memory_fraction' and 'gpu_memory_limit_bytes' are both set: keep one"
        )
    if fraction is not None:
        try:
            value = float(fraction)
        except ValueError:
            value = math.nan
        if not 0 < value <= 1:  # NaN fails too
            raise InvalidArgumentError(
                f"parameters 'gpu_memory_fraction' must be a number above 0 and at most 1, got '{fraction}'"
            )
        return MemoryCap(fraction=value)
    if limit is not None:
        return MemoryCap(limit_bytes=_positive_int("gpu_memory_limit_bytes", limit))
    return None


def _positive_int(key: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgumentError(f"parameters '{key}' must be a positive integer, got '{text}'")
    return value
