"""Deep health (``GET /v2/health/deep``): is the server actually able to answer, not merely up?

Why beside Triton's live and ready: ready says every model loaded, but not that a model still answers
(a wedged instance, a device lost since load), that the event loop is not starved, or that memory is
not about to run out. An orchestrator or a load balancer can act on those before clients time out.

One evaluation:

- the event loop: the delay of one ``asyncio.sleep(0)`` turn, against the probe timeout;
- each READY version: one real inference of its first warm-up sample (one row), or of zeros shaped
  from the config (-1 dims as 1, BYTES as ``b""``), through the version's scheduler, within the
  probe timeout. The probes run concurrently, so an evaluation lasts about one timeout at most;
- host memory (``psutil``) and, when NVML answers, each GPU's memory, against their ratios.

A model with no READY version, or one whose own ``is_ready()`` says no (a Python model's, cached as
model readiness caches it), is reported as ``not_ready`` and does not fail it: readiness already
says that, and one broken model must not make a balancer drop a server that serves the others. An
ensemble is not probed: its steps' models are, and its probe would be requests to them.

Probes go to the scheduler, not through :meth:`InferenceServer.infer`: they are not requests, so the
request counters (success, failure, queue, latency, ``last_inference``) never see them. The execution
is real work of the model, so the scheduler records it as any execution (``execution_count``,
``inference_count``, compute times); with dynamic batching a probe may even share a batch with
requests, and keeping it out of those figures would mean a second bookkeeping path in the schedulers.

An evaluation is shared: concurrent callers wait for the one in flight, and its result is reused for
``cache_secs``, so a storm of probes costs at most one inference per model every ``cache_secs``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import ENSEMBLE_PLATFORM
from conch.core import datatypes
from conch.core.errors import ConchError, InternalError
from conch.core.request_validation import validate_request
from conch.core.types import InferenceRequest, Tensor
from conch.lifecycle.shared_result import SharedResult
from conch.models.model import ModelVersion
from conch.observability.host_metrics import _open_gpus, pynvml
from conch.repository.warmup import warmup_samples
from conch.scheduling.scheduler import ScheduledRequest
from conch.server import InferenceServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeepHealthSettings:
    """The ``--health-*`` flags: probe timeout, memory ratios (used/total) and result lifetime."""

    probe_timeout_ms: int = 1000
    max_memory_ratio: float = 0.95
    max_gpu_memory_ratio: float = 0.90
    cache_secs: float = 5


class Status(enum.StrEnum):
    """A check's outcome; only ``fail`` makes the server unhealthy."""

    PASS = "pass"
    FAIL = "fail"
    NOT_READY = "not_ready"


@dataclass(frozen=True)
class Check:
    """One line of the answer. ``ok`` is false only for a check that fails the server."""

    name: str
    status: Status
    detail: str
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAIL

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "status": str(self.status),
            "detail": self.detail,
            "seconds": round(self.seconds, 6),
        }


@dataclass(frozen=True)
class ProbeReading:
    """One model's probe as measured. ``version`` None: the model has no READY version to probe."""

    model: str
    version: int | None
    seconds: float = 0.0
    error: str = ""  # empty: it answered
    timed_out: bool = False
    #: Why the model says it is not ready (its ``is_ready()``); then it is not probed.
    not_ready: str = ""


@dataclass(frozen=True)
class GpuReading:
    """One GPU's memory from NVML; ``error`` when NVML could not read the device."""

    uuid: str
    used_bytes: int = 0
    total_bytes: int = 0
    error: str = ""


@dataclass(frozen=True)
class Readings:
    """Everything one evaluation measured, before any judgement."""

    loop_delay_s: float
    probes: tuple[ProbeReading, ...]
    memory_ratio: float
    gpus: tuple[GpuReading, ...] = ()


def judge(readings: Readings, settings: DeepHealthSettings) -> list[Check]:
    """The checks ``readings`` make under ``settings``: the whole decision, with no clock or I/O."""
    timeout_s = settings.probe_timeout_ms / 1000
    loop_ok = readings.loop_delay_s <= timeout_s
    checks = [
        Check(
            "event_loop",
            Status.PASS if loop_ok else Status.FAIL,
            f"one turn took {readings.loop_delay_s * 1000:.3f} ms; limit {settings.probe_timeout_ms} ms",
            readings.loop_delay_s,
        )
    ]
    checks += [_judge_probe(probe, settings) for probe in readings.probes]
    checks.append(
        _ratio_check("host_memory", readings.memory_ratio, settings.max_memory_ratio, "host memory")
    )
    for gpu in readings.gpus:
        name = f"gpu_memory:{gpu.uuid}"
        if gpu.error or gpu.total_bytes <= 0:
            checks.append(
                Check(name, Status.FAIL, f"NVML could not read the GPU: {gpu.error or 'no memory'}")
            )
            continue
        ratio = gpu.used_bytes / gpu.total_bytes
        checks.append(_ratio_check(name, ratio, settings.max_gpu_memory_ratio, "GPU memory"))
    return checks


def healthy(checks: list[Check]) -> bool:
    """Healthy unless a check failed; ``not_ready`` models are reported, never held against it."""
    return all(check.ok for check in checks)


def _judge_probe(probe: ProbeReading, settings: DeepHealthSettings) -> Check:
    if probe.version is None:
        detail = "no READY version; not probed (the repository index gives the reason)"
        return Check(f"model:{probe.model}", Status.NOT_READY, detail)
    name = f"model:{probe.model}/{probe.version}"
    if probe.not_ready:
        return Check(name, Status.NOT_READY, f"the model reports itself not ready: {probe.not_ready}")
    if probe.timed_out:
        detail = f"no answer within {settings.probe_timeout_ms} ms"
        return Check(name, Status.FAIL, detail, probe.seconds)
    if probe.error:
        return Check(name, Status.FAIL, f"the probe inference failed: {probe.error}", probe.seconds)
    return Check(name, Status.PASS, f"answered in {probe.seconds * 1000:.3f} ms", probe.seconds)


def _ratio_check(name: str, ratio: float, limit: float, what: str) -> Check:
    status = Status.PASS if ratio <= limit else Status.FAIL
    return Check(name, status, f"{what} {ratio:.2%} used; limit {limit:.2%}")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation's answer. ``number`` counts evaluations, so a cached answer shows the same one."""

    number: int
    evaluated_at: float  # Unix time, seconds
    seconds: float
    checks: tuple[Check, ...]

    @property
    def healthy(self) -> bool:
        return healthy(list(self.checks))

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "failed": [check.name for check in self.checks if not check.ok],
            "evaluation": self.number,
            "evaluated_at": round(self.evaluated_at, 3),
            "seconds": round(self.seconds, 6),
            "checks": [check.to_json() for check in self.checks],
        }


class DeepHealth:
    """Evaluates one :class:`InferenceServer`'s deep health, shared and cached (see the module)."""

    def __init__(
        self,
        server: InferenceServer,
        settings: DeepHealthSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.settings = settings or DeepHealthSettings()
        self._shared = SharedResult(self._evaluate, self.settings.cache_secs, clock)
        self._count = 0
        self._gpus: list[tuple[str, Any]] | None = None  # opened on first use, not at start

    async def evaluate(self) -> Evaluation:
        """The current evaluation: the cached one while it is fresh, else a new one."""
        return await self._shared.get()

    async def _evaluate(self) -> Evaluation:
        started_wall, started = time.time(), time.perf_counter()
        loop_delay = await _loop_delay()
        readings = Readings(
            loop_delay_s=loop_delay,
            probes=tuple(await asyncio.gather(*self._probes())),
            memory_ratio=psutil.virtual_memory().percent / 100,
            gpus=tuple(self._gpu_readings()),
        )
        self._count += 1
        evaluation = Evaluation(
            self._count, started_wall, time.perf_counter() - started, tuple(judge(readings, self.settings))
        )
        if not evaluation.healthy:
            log.warning("deep health check failed: %s", ", ".join(evaluation.to_json()["failed"]))
        return evaluation

    def _probes(self) -> list[Awaitable[ProbeReading]]:
        probes: list[Awaitable[ProbeReading]] = []
        for name, model in sorted(self.server.repository.models.items()):
            ready = model.ready_versions
            if not ready:
                probes.append(_constant(ProbeReading(name, None)))
            model_dir = self.server.repository.root / name
            # An ensemble's probe would be requests to its steps, whose models are probed themselves.
            probes += [self._probe(v, model_dir) for v in ready if v.config.platform != ENSEMBLE_PLATFORM]
        return probes

    async def _probe(self, version: ModelVersion, model_dir: Path) -> ProbeReading:
        if version.reported_readiness is not None:
            ready, why = await version.reported_readiness()
            if not ready:
                return ProbeReading(
                    version.name, version.version, not_ready=why or "is_ready() returned False"
                )
        started = time.perf_counter()
        timeout_s = self.settings.probe_timeout_ms / 1000
        try:
            await asyncio.wait_for(_run_probe(version, model_dir), timeout_s)
        except TimeoutError:
            return ProbeReading(version.name, version.version, time.perf_counter() - started, timed_out=True)
        except ConchError as exc:
            error = exc.message
        except Exception as exc:
            # As for a request: the answer names the error's type; the log keeps the traceback.
            log.exception("deep health probe of model '%s' failed", version.name)
            error = type(exc).__name__
        else:
            return ProbeReading(version.name, version.version, time.perf_counter() - started)
        return ProbeReading(version.name, version.version, time.perf_counter() - started, error=error)

    def _gpu_readings(self) -> list[GpuReading]:
        if self._gpus is None:
            self._gpus = _open_gpus()
        readings = []
        for uuid, handle in self._gpus:
            try:
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            except pynvml.NVMLError as exc:
                readings.append(GpuReading(uuid, error=str(exc)))
                continue
            readings.append(GpuReading(uuid, int(info.used), int(info.total)))
        return readings


def probe_inputs(config: mc.ModelConfig, model_dir: Path) -> dict[str, np.ndarray]:
    """One row of the first warm-up sample, or zeros shaped by the config when there is none.

    A warm-up sample can hold several rows (``batch_size``); the probe keeps the first, so it costs
    one row whatever the warm-up does. Inputs the sample leaves out (optional ones) stay out.
    """
    batching = config.max_batch_size > 0
    samples = warmup_samples(config, model_dir)
    if samples:
        return {name: array[:1] if batching else array for name, array in samples[0].inputs.items()}
    inputs = {}
    for entry in config.input:
        shape = tuple(1 if d == -1 else d for d in entry.dims)
        inputs[entry.name] = datatypes.zeros(
            datatypes.from_config_type(entry.data_type), (1, *shape) if batching else shape
        )
    return inputs


async def _run_probe(version: ModelVersion, model_dir: Path) -> None:
    config = version.config
    wire_types = {entry.name: datatypes.from_config_type(entry.data_type).name for entry in config.input}
    tensors = [
        Tensor(name, wire_types.get(name, ""), array)
        for name, array in probe_inputs(config, model_dir).items()
    ]
    request = InferenceRequest(model_name=version.name, model_version=str(version.version), inputs=tensors)
    # The server's own checks, so a probe the model would refuse says why, as a client would hear it.
    inputs, output_names = validate_request(
        request, config, version.max_batch_size_completed, version.request_rules
    )
    if version.scheduler is None:
        raise InternalError("the version is READY but has no scheduler")
    # No in_flight: a probe is not traffic for busy polling, and never runs inline on the event loop,
    # where a slow model would hold the loop and the timeout could not fire.
    await version.scheduler.schedule(
        ScheduledRequest(inputs, output_names, request.batch_size(config.max_batch_size > 0))
    )


async def _loop_delay() -> float:
    """How long one turn of the event loop takes: every callback ready now runs before we resume."""
    started = time.perf_counter()
    await asyncio.sleep(0)
    return time.perf_counter() - started


async def _constant(reading: ProbeReading) -> ProbeReading:
    return reading
