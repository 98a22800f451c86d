"""A model's instances (Triton's ``instance_group`` count) and the worker threads that run them.

Each instance runs on its own thread, so ``count`` executions proceed at once: ONNX Runtime releases
the GIL while it computes. Schedulers acquire an idle instance, run on it, and release it. A single
instance whose executions are shorter than a thread hop runs on the event loop instead.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from conch.core.errors import UnavailableError
from conch.core.types import ExecutionTiming

#: Executions faster than this (moving average) run on the event loop. Measured on the worker thread,
#: the benchmark's tiny model took 40-60 us (GIL hand-offs included) against 10-15 us inline, and the
#: round trip to the thread cost more than the model.
INLINE_BELOW_NS = 200_000
#: A request alone in the server runs on the event loop only when this model's executions average less
#: than this: the loop answers nothing else meanwhile (health checks, a second request that could use
#: another instance), so a slow model must not hold it.
INLINE_ALONE_BELOW_NS = 2_000_000
_SMOOTHING = 0.1
_CLOSED: Any = object()


class ModelInstance(Protocol):
    """What the pool needs from a backend instance."""

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]: ...


class InstancePool:
    """Idle instances, and one worker thread per instance to run them on."""

    def __init__(self, instances: list[Any], name: str) -> None:
        #: The instances take their batch as a list of requests (``RequestListInstance``), on the loop.
        self.takes_request_lists = bool(instances) and all(hasattr(i, "execute") for i in instances)
        self._executor = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix=f"conch-{name}")
        self._idle: asyncio.Queue[ModelInstance] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self.count = len(instances)
        self.instances = list(instances)
        self._out_of_service: list[Any] = []
        # Start on the worker thread, even for a request alone, until executions are measured.
        self._average_ns = float(INLINE_ALONE_BELOW_NS)
        self._inline = False

    @property
    def always_inline(self) -> bool:
        """Every execution runs on the event loop now, alone or not (a single, fast instance)."""
        return self._inline

    @property
    def average_execution_ns(self) -> float:
        """Moving average of this pool's executions (compute input, infer and output), in ns; the
        batcher waits longer for a batch's company when executions are long."""
        return self._average_ns

    async def acquire(self) -> Any:
        """The next idle instance; waits while every instance is busy (or out of service).

        An instance whose ``serving`` is false (a Python model's process that died and is being
        restarted) is set aside until :meth:`rejoin`, so no request is sent to it meanwhile.
        """
        while True:
            instance = await self._idle.get()
            if instance is _CLOSED:
                self._idle.put_nowait(_CLOSED)  # every other waiter must wake too
                raise UnavailableError("the model's instances have stopped")
            if getattr(instance, "serving", True):
                return instance
            self._out_of_service.append(instance)

    def release(self, instance: Any) -> None:
        if getattr(instance, "serving", True):
            self._idle.put_nowait(instance)
        else:
            self._out_of_service.append(instance)

    def rejoin(self, instance: Any) -> None:
        """An instance set aside serves again (its process restarted)."""
        if instance in self._out_of_service:
            self._out_of_service.remove(instance)
            self._idle.put_nowait(instance)

    async def run(
        self,
        instance: ModelInstance,
        inputs: dict[str, np.ndarray],
        output_names: list[str],
        inline: bool = False,
    ) -> tuple[dict[str, np.ndarray], ExecutionTiming]:
        """Run ``instance``; returns the outputs and compute timing.

        An execution normally goes to the instance's worker thread. It runs right here on the event
        loop instead when the caller says nothing else needs the loop (``inline``: the request is alone
        in the server) and the model's executions are short (:data:`INLINE_ALONE_BELOW_NS`), or when
        they take less than the hop to a thread and back costs and there is a single instance: waiting
        for the thread would cost more than the model.
        """
        timing = ExecutionTiming()
        if self._inline or (inline and self._average_ns < INLINE_ALONE_BELOW_NS):
            outputs = instance.run(inputs, output_names, timing)
        else:
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(self._executor, instance.run, inputs, output_names, timing)
        spent = timing.compute_input_ns + timing.compute_infer_ns + timing.compute_output_ns
        self._average_ns += (spent - self._average_ns) * _SMOOTHING
        self._inline = self.count == 1 and self._average_ns < INLINE_BELOW_NS
        return outputs, timing

    def close(self) -> None:
        """Stop the worker threads once running executions finish, and instances that have a
        ``shutdown`` (Python models' processes); requests still waiting for an instance get a 503."""
        self._executor.shutdown(wait=True)
        for instance in self.instances:
            if hasattr(instance, "shutdown"):
                instance.shutdown()
        self._idle.put_nowait(_CLOSED)
