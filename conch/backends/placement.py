"""Where each model instance runs, from Triton's ``instance_group``.

``count`` instances per group on the CPU; for ``KIND_GPU``, ``count`` instances on each listed GPU
(all of ``gpus``, or GPU 0 when the list is empty), as Triton places them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc


@dataclass(frozen=True)
class Placement:
    """One instance's device: ``gpu`` with its index, or the CPU."""

    gpu: bool = False
    device_id: int = 0

    def __str__(self) -> str:
        return f"GPU {self.device_id}" if self.gpu else "CPU"


CPU = Placement()


def instance_placements(config: mc.ModelConfig) -> list[Placement]:
    """One entry per instance the config asks for, in group order (at least one CPU instance)."""
    placements: list[Placement] = []
    for group in config.instance_group:
        count = max(group.count, 1)
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            for gpu in list(group.gpus) or [0]:
                placements += [Placement(gpu=True, device_id=gpu)] * count
        else:
            placements += [CPU] * count
    return placements or [CPU]
