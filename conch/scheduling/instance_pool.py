"""A model's instances (Triton's ``instance_group`` count) and the worker threads that run them.

Each instance runs on its own thread, so ``count`` executions proceed at once: ONNX Runtime releases
the GIL while it computes. A request waits (queue time) only when every instance is busy.
"""

from __future__ import annotations

import asyncio
import time
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
    """Hands each execution to an idle instance on a worker thread."""

    def __init__(self, instances: list[ModelInstance], name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix=f"conch-{name}")
        self._idle: asyncio.Queue[ModelInstance] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self.count = len(instances)

    async def execute(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], ExecutionTiming, int]:
        """Run on the next idle instance; returns outputs, compute timing and ns spent waiting."""
        waited_from = time.perf_counter_ns()
        instance = await self._idle.get()
        queue_ns = time.perf_counter_ns() - waited_from
        timing = ExecutionTiming()
        try:
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(self._executor, instance.run, inputs, output_names, timing)
        finally:
            self._idle.put_nowait(instance)
        return outputs, timing, queue_ns

    def close(self) -> None:
        """Stop the worker threads once running executions finish."""
        self._executor.shutdown(wait=True)
