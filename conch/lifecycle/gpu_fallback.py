"""KIND_GPU instances asked for where the backend cannot reach a GPU: the CPU fallback, or a failed load.

A config that asks for GPU instances on a machine or build without CUDA loads on the CPU only when
the model's fallback strategy allows the CPU level; otherwise the load fails naming what the backend
lacks and how to get it.
"""

from __future__ import annotations

from conch.core.errors import UnavailableError
from conch.models.fallback import FallbackPolicy, FallbackReason, mark_cpu_fallback
from conch.models.model import ModelVersion
from conch.models.strategy import FallbackLevel

#: Why an ONNX model's KIND_GPU instances cannot run on a GPU here, and the backend's own way out.
ONNX_WITHOUT_CUDA = (
    "this ONNX Runtime has no CUDA provider",
    "install onnxruntime-gpu on a machine with a GPU",
)


def gpu_instances_on_cpu(
    version: ModelVersion, wanted_gpus: int, policy: FallbackPolicy | None, why: tuple[str, str]
) -> None:
    """KIND_GPU without CUDA: the CPU fallback when the strategy allows it, else a failed load.

    ``why``: what the backend lacks and how to get it, for the reason of the failed load.
    """
    if policy is None or not policy.allows(FallbackLevel.CPU):
        missing, remedy = why
        raise UnavailableError(
            f"the config asks for {wanted_gpus} KIND_GPU instance(s) but {missing}: {remedy}, use KIND_CPU, "
            "or add CPU to FALLBACK_STRATEGY to run on the CPU instead"
        )
    version.statistics.gpu_fallback_instances = wanted_gpus
    mark_cpu_fallback(version, FallbackReason.GPU_UNAVAILABLE, gpu_instances=wanted_gpus)
