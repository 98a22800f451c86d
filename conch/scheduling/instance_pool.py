"""A model's instances (Triton's ``instance_group`` count) and the worker threads that run them.

Each instance runs on its own thread, so ``count`` executions proceed at once: ONNX Runtime releases
the GIL while it computes. Schedulers acquire an idle instance, run on it, and release it. A single
instance whose executions are short runs on the event loop instead, unless another model has started
an execution since its last one (:meth:`InstancePool.run` says why).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from conch.core.errors import UnavailableError
from conch.core.types import ExecutionTiming
from conch.scheduling.shared_turns import turns_of

#: Executions of a single instance shorter than this (moving average) run on the event loop, under
#: load too; longer ones go to its worker thread: the loop answers nothing else while it runs a model
#: (health checks, metrics, other models' requests), so a slow model must not hold it. See
#: :meth:`InstancePool.run` for the figure that set it.
INLINE_BELOW_NS = 4_000_000
#: The execution of a request alone in the server runs on the loop, on any number of instances, when
#: the model's executions average less than this. It is also every pool's estimate before its first
#: execution is measured.
INLINE_ALONE_BELOW_NS = 2_000_000
#: Executions of a single instance shorter than this run on the loop even while other models compute:
#: the hop to a thread and back costs more than the model (the benchmark's ``tiny`` took 40-60 us on
#: its worker thread, GIL hand-offs included, against 10-15 us on the loop).
SHORTER_THAN_A_HOP_NS = 200_000
_SMOOTHING = 0.1
_CLOSED: Any = object()


class _LastStarted:
    """Which model's execution started last in this process (one event loop, so no lock), by name, so
    that an unloaded model's pool is not kept alive by it. The versions of one model count as one:
    during a release they share the model's traffic, and a 10% canary keyed apart from its baseline
    would run on its worker thread while the baseline ran on the loop, a slower tail that the release
    gate reads as a latency regression (P95 +137% for a candidate of the same graph)."""

    model = ""


class ModelInstance(Protocol):
    """What the pool needs from a backend instance."""

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]: ...


class InstancePool:
    """Idle instances, and one worker thread per instance to run them on."""

    def __init__(self, instances: list[Any], name: str, model: str = "") -> None:
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
        self._measured = False
        #: Whose executions count as this pool's for "another model started one since".
        self.model = model or name

    @property
    def always_inline(self) -> bool:
        """A single instance whose measured executions are short enough for the loop
        (:data:`INLINE_BELOW_NS`): they run there unless another model's started since, and with one
        instance nothing can run beside them, so the batcher awaits them in its own task."""
        return self.count == 1 and self._measured and self.average_execution_ns < INLINE_BELOW_NS

    @property
    def average_execution_ns(self) -> float:
        """Moving average of this pool's executions (compute input, infer and output), in ns; the
        batcher waits longer for a batch's company when executions are long. While the model's
        versions take turns (:mod:`conch.scheduling.shared_turns`), the line's average over both."""
        turns = turns_of(self.model)
        if turns is not None and turns.average_ns is not None:
            return turns.average_ns
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

        An execution runs right here on the event loop when the model has a single instance whose
        executions average under :data:`INLINE_BELOW_NS` and no other model has started an execution
        since this one's last; or when the caller says nothing else needs the loop (``inline``: the
        request is alone in the server) and they average under :data:`INLINE_ALONE_BELOW_NS`.
        Otherwise, and until the model's first execution is measured, it goes to the instance's
        worker thread.

        Why a single instance runs on the loop even under load: on the worker thread the execution
        competes for the cores with the loop, which goes on with the protocol work of the requests
        outside the batch, and it waits for the GIL to start and to return (a median 0.06 to 0.18 ms
        to start on ``s384`` at 32 gRPC clients, 2 cores). On the loop the two cores go to ONNX
        Runtime's threads while it runs, and requests that arrive meanwhile join the next batch. At
        32 gRPC clients on 2 cores ``mlp`` (2.6 ms executions) served 4,275 calls/s with a 4 ms bound
        against 4,038 with 2 ms (``python -m bench.grpc_cpu_ab``). Longer models gained on the loop
        too when forced there (2 to 12%), but the bound keeps a slow model from holding it.

        Why not when another model started an execution since: two busy models would then take
        turns on the one loop where their worker threads compute side by side. Executions shorter
        than a hop to the thread (:data:`SHORTER_THAN_A_HOP_NS`) stay on the loop even then.
        """
        timing = ExecutionTiming()
        if self._on_the_loop(inline):
            outputs = instance.run(inputs, output_names, timing)
        else:
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(self._executor, instance.run, inputs, output_names, timing)
        spent = timing.spent_ns
        # The first measured execution sets the average: smoothed from the starting estimate, a slow
        # model would run several executions on the loop before its average passed the bound.
        self._average_ns += (spent - self._average_ns) * (_SMOOTHING if self._measured else 1.0)
        self._measured = True
        turns = turns_of(self.model)
        if turns is not None:
            turns.observe(spent, _SMOOTHING)
        return outputs, timing

    def _on_the_loop(self, alone: bool) -> bool:
        """Whether this execution runs on the event loop (the rules :meth:`run` gives); notes this
        pool as the last to start one."""
        sole = _LastStarted.model == self.model
        _LastStarted.model = self.model
        if not self._measured:
            return False
        average = self.average_execution_ns
        if alone and average < INLINE_ALONE_BELOW_NS:
            return True
        return self.count == 1 and average < (INLINE_BELOW_NS if sole else SHORTER_THAN_A_HOP_NS)

    def close(self) -> None:
        """Stop the worker threads once running executions finish, and instances that have a
        ``shutdown`` (Python models' processes); requests still waiting for an instance get a 503."""
        self._executor.shutdown(wait=True)
        for instance in self.instances:
            if hasattr(instance, "shutdown"):
                instance.shutdown()
        self._idle.put_nowait(_CLOSED)
