"""A model's instances (Triton's ``instance_group`` count) and the worker threads that run them.

Each instance runs on its own thread, so ``count`` executions proceed at once: ONNX Runtime releases
the GIL while it computes. Schedulers acquire an idle instance, run on it, and release it.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from conch.core.types import ExecutionTiming


class ModelInstance(Protocol):
    """What the pool needs from a backend instance."""

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]: ...


class InstancePool:
    """Idle instances, and one worker thread per instance to run them on."""

    def __init__(self, instances: list[ModelInstance], name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix=f"conch-{name}")
        self._idle: asyncio.Queue[ModelInstance] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self.count = len(instances)

    async def acquire(self) -> ModelInstance:
        """The next idle instance; waits while every instance is busy."""
        return await self._idle.get()

    def release(self, instance: ModelInstance) -> None:
        self._idle.put_nowait(instance)

    async def run(
        self, instance: ModelInstance, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], ExecutionTiming]:
        """Run ``instance`` on its worker thread; returns the outputs and compute timing."""
        timing = ExecutionTiming()
        loop = asyncio.get_running_loop()
        outputs = await loop.run_in_executor(self._executor, instance.run, inputs, output_names, timing)
        return outputs, timing

    def close(self) -> None:
        """Stop the worker threads once running executions finish."""
        self._executor.shutdown(wait=True)
