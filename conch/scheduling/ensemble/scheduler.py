"""Runs an ensemble's steps for one request: each step as soon as the tensors it reads are written.

Why through :meth:`conch.server.InferenceServer.infer`: a step is an ordinary request to its model,
so it takes that model's route (release split, circuit breaker, fallbacks), joins its batches and
counts in its statistics and metrics, exactly as a client's request would; the ensemble adds no
second path to any of that. Steps whose inputs are ready together run concurrently (a diamond's two
arms overlap), and a lone ready step is awaited in place, without a task of its own.

Before the steps run, each step model's served version is looked up: a step model that is not
loaded or not READY answers 503 naming the step, and a version not seen before is checked against
the ensemble (:mod:`conch.scheduling.ensemble.step_checks`) once, so a step model loaded after the
ensemble, or replaced, is checked before it gets a request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import ENSEMBLE_PLATFORM
from conch.core.errors import ConchError, ErrorKind, UnavailableError
from conch.core.types import ExecutionTiming, InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.observability.statistics import ModelStatistics
from conch.observability.trace_settings import MODEL_ATTRIBUTE
from conch.observability.tracing import RequestTrace
from conch.scheduling.ensemble.plan import EnsemblePlan, EnsembleStep
from conch.scheduling.ensemble.step_checks import nested_cycle, step_problems
from conch.scheduling.scheduler import ScheduledRequest

#: The server's request path: :meth:`InferenceServer.infer` for requests already admitted.
Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


class StepVersion(Protocol):
    """What the ensemble reads of a step model's served version (a ``models.model.ModelVersion``)."""

    @property
    def config(self) -> mc.ModelConfig: ...


class StepModel(Protocol):
    """What the ensemble reads of a step model served now (a ``models.model.Model``)."""

    @property
    def ready_versions(self) -> Sequence[StepVersion]: ...

    def ready_version(self, version: str) -> StepVersion: ...


#: The model served now under a name, or None (the served models' ``models.get``).
StepModels = Callable[[str], StepModel | None]


class StepError(ConchError):
    """A step's failure, named after the step, with the step's own kind (a 400 stays a 400)."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind


class EnsembleScheduler:
    """The scheduler of one ensemble version: its steps, run through the server for each request."""

    def __init__(
        self,
        config: mc.ModelConfig,
        plan: EnsemblePlan,
        infer: Infer,
        models: StepModels,
        statistics: ModelStatistics,
    ) -> None:
        self._config = config
        self._plan = plan
        self._infer = infer
        self._models = models
        self._statistics = statistics
        #: The step versions last found consistent with the ensemble, one per step.
        self._checked: tuple[StepVersion, ...] = ()

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]:
        started = time.perf_counter_ns()
        self._check_step_versions()
        tensors = dict(request.inputs)
        await self._run_steps(tensors, request.parameters, request.trace)
        timing = ExecutionTiming(compute_infer_ns=time.perf_counter_ns() - started)
        self._statistics.record_execution(request.rows, 1, timing)
        return {name: tensors[name] for name in request.output_names}

    def close(self) -> None:
        """Nothing to stop: the step models own the instances."""

    def _check_step_versions(self) -> None:
        versions = tuple(self._served_version(step) for step in self._plan.steps)
        if len(versions) == len(self._checked) and all(
            a is b for a, b in zip(versions, self._checked, strict=True)
        ):
            return
        configs = {
            step.index: version.config for step, version in zip(self._plan.steps, versions, strict=True)
        }
        problems = step_problems(self._config, self._plan, configs)
        cycle = nested_cycle(self._plan.name, self._plan, ensemble_steps(self._models))
        problems += [cycle] if cycle else []
        if problems:
            raise UnavailableError(
                f"{problems[0]}. Ensemble '{self._plan.name}' cannot run with the step models served now: "
                "fix its config.pbtxt or the step model's, then load them again"
            )
        self._checked = versions

    def _served_version(self, step: EnsembleStep) -> StepVersion:
        where = f"ensemble '{self._plan.name}' step '{step.model_name}' is not available"
        model = self._models(step.model_name)
        if model is None:
            raise UnavailableError(
                f"{where}: no model '{step.model_name}' is loaded; add it to the model repository (or load "
                "it in explicit mode), or fix the step's model_name"
            )
        try:
            return model.ready_version(step.model_version)
        except ConchError as exc:
            raise UnavailableError(f"{where}: {exc.message}") from None

    async def _run_steps(
        self, tensors: dict[str, np.ndarray], parameters: dict[str, object], trace: RequestTrace | None = None
    ) -> None:
        waiting = list(self._plan.steps)
        # Ensemble inputs count as written even when an optional one was not sent: its steps go
        # without it, as their model's input must then be optional too.
        written = set(self._plan.inputs)
        running: dict[asyncio.Task[dict[str, np.ndarray]], EnsembleStep] = {}
        try:
            while waiting or running:
                ready = [step for step in waiting if step.reads <= written]
                for step in ready:
                    waiting.remove(step)
                if len(ready) == 1 and not running:
                    tensors.update(await self._run_step(ready[0], tensors, parameters, trace))
                    written |= set(ready[0].output_map.values())
                    continue
                for step in ready:
                    running[asyncio.create_task(self._run_step(step, tensors, parameters, trace))] = step
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    tensors.update(task.result())
                    written |= set(step.output_map.values())
        finally:
            # A failed step answers the client only once its siblings are done: cancelling them midway
            # through their model's batcher would leave work behind that nobody waits for.
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _run_step(
        self,
        step: EnsembleStep,
        tensors: dict[str, np.ndarray],
        parameters: dict[str, object],
        trace: RequestTrace | None = None,
    ) -> dict[str, np.ndarray]:
        inputs = [
            Tensor.of(model_input, tensors[tensor])
            for model_input, tensor in step.input_map.items()
            if tensor in tensors
        ]
        request = InferenceRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            inputs=inputs,
            outputs=[RequestedOutput(name) for name in step.output_map],
            parameters=dict(parameters),
        )
        if trace is not None:  # the step is a span of the ensemble's request, its stages under it
            attributes = {MODEL_ATTRIBUTE: step.model_name, "conch.model.version": step.model_version}
            request.trace = trace.child(f"step {step.model_name}", attributes)
        try:
            response = await self._infer(request)
        except ConchError as exc:
            if request.trace is not None:
                request.trace.finish({}, exc.message if exc.kind.http_status >= 500 else None)
            raise StepError(f"ensemble '{self._plan.name}' {step.label}: {exc.message}", exc.kind) from exc
        if request.trace is not None:
            request.trace.finish({})
        return {step.output_map[output.name]: output.data for output in response.outputs}


def ensemble_steps(models: StepModels) -> Callable[[str], Sequence[str]]:
    """The step model names of a served ensemble (its newest READY version's), none for other models."""

    def steps_of(name: str) -> Sequence[str]:
        model = models(name)
        ready = model.ready_versions if model is not None else []
        if not ready or ready[-1].config.platform != ENSEMBLE_PLATFORM:
            return ()
        return [step.model_name for step in ready[-1].config.ensemble_scheduling.step]

    return steps_of
