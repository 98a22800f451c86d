"""Shadow (dual-read): a copy of an answered request runs on the release's other version, off the
client's path, and the two outputs are compared for the gate.

The client has its answer before the copy starts, so its latency never includes it. Copies are
bounded: at most ``limit`` run at once, and one more is dropped and counted (``conch_shadow_dropped``),
never queued and never at the live request's expense. A copy goes straight to the version's scheduler,
so it is not counted as a client request in the statistics; its execution is real work and counts as
one. A copy that fails counts as a server error of its version, as a live request would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import numpy as np

from conch.core import datatypes
from conch.core.errors import ConchError
from conch.models.model import ModelVersion
from conch.observability import tracing
from conch.observability.trace_settings import MODEL_ATTRIBUTE
from conch.router.releases import RouterReleases
from conch.scheduling.scheduler import ScheduledRequest

log = logging.getLogger(__name__)

#: Copies running at once, over all models, before further ones are dropped.
DEFAULT_SHADOW_LIMIT = 64


class ShadowRunner:
    """Runs the copies of one server and reports each comparison to the release controller."""

    def __init__(self, releases: RouterReleases, limit: int = DEFAULT_SHADOW_LIMIT) -> None:
        self.releases = releases
        self.limit = limit
        self._running: set[asyncio.Task[None]] = set()

    def submit(
        self,
        answered: ModelVersion,
        target: ModelVersion,
        request: ScheduledRequest,
        outputs: Mapping[str, np.ndarray],
    ) -> None:
        """Copy ``request`` (answered by ``answered`` with ``outputs``) to ``target``, or drop it."""
        if len(self._running) >= self.limit or target.scheduler is None:
            self.releases.record_dropped(answered.name)
            return
        copy = ScheduledRequest(
            request.inputs, list(request.output_names), request.rows, dict(request.parameters)
        )
        if request.trace is not None and tracing.tracer is not None:
            shadow = {MODEL_ATTRIBUTE: target.name, "conch.model.version": str(target.version)}
            copy.trace = request.trace.child("shadow", shadow)
        task = asyncio.get_running_loop().create_task(self._run(answered, target, copy, dict(outputs)))
        if copy.trace is not None:
            task.add_done_callback(copy.trace.finished)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def drained(self) -> None:
        """Wait for the copies running now (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def _run(
        self,
        answered: ModelVersion,
        target: ModelVersion,
        copy: ScheduledRequest,
        answer: dict[str, np.ndarray],
    ) -> None:
        model = answered.name
        started = time.perf_counter()
        try:
            assert target.scheduler is not None
            other = await target.scheduler.schedule(copy)
        except ConchError as exc:
            failed = exc.kind.http_status >= 500
            self._record(model, target.version, started, copy, failed)
            return
        except Exception:  # the copy must never disturb the server; its failure is the version's
            log.exception("shadow copy on model '%s' version %d failed", model, target.version)
            self._record(model, target.version, started, copy, True)
            return
        self._record(model, target.version, started, copy, False)
        types = {
            entry.name: datatypes.from_config_type(entry.data_type).name for entry in answered.config.output
        }
        self.releases.compare_copy(model, answered.version, answer, other, types, copy.output_names)

    def _record(self, model: str, version: int, started: float, copy: ScheduledRequest, failed: bool) -> None:
        """The copy's answer for the gate, timed as the router times a client's."""
        own, execution = copy.gate_times(time.perf_counter() - started)
        self.releases.record_answer(model, version, own, failed, copy=True, execution=execution)
