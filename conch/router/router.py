"""Picks the version that answers a request: the newest READY one, unless its circuit or the fallback say not.

The lifecycle decides which versions exist; this decides, per request, which one answers:

1. A request that names a version gets that version (404/503 as before), through its breaker.
2. A request that names none gets the newest READY version. When that version's circuit is open, or a
   newer version failed to load, the model's fallback policy (:mod:`conch.models.fallback`) may send
   it to the newest earlier version (``MODEL``), or answer the business default (``BUSINESS``).
3. Without a fallback, an open circuit answers 503 at once: a failing version fails fast.

Each fallback answer is marked (``fallback_level``, ``fallback_reason``) and counted in
``conch_fallback_total``; a fallback is logged as one event when it starts, then every ``LOG_EVERY_S``
with the number of answers since.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from conch.core.errors import UnavailableError
from conch.models.circuit_breaker import CallOutcome
from conch.models.fallback import FallbackReason, mark_cpu_fallback
from conch.models.model import Model, ModelVersion, Route
from conch.models.served_models import ServedModels
from conch.models.strategy import FallbackLevel
from conch.observability.events import emit
from conch.router.release_split import pick
from conch.router.releases import RouterReleases
from conch.router.shadow import ShadowRunner
from conch.scheduling.scheduler import ScheduledRequest

log = logging.getLogger(__name__)

#: Seconds between two log records of the same ongoing fallback.
LOG_EVERY_S = 10.0


class VersionRouter:
    """Routes requests of one repository; counts the fallbacks it takes."""

    def __init__(
        self,
        repository: ServedModels,
        clock: Callable[[], float] = time.monotonic,
        releases: RouterReleases | None = None,
    ) -> None:
        self.repository = repository
        self.clock = clock
        self.releases = releases
        self.shadows = ShadowRunner(releases) if releases is not None else None
        #: (model, version, level, reason) -> answers; ``conch_fallback_total`` reads it.
        self.fallbacks: Counter[tuple[str, str, str, str]] = Counter()
        self._logged_at: dict[tuple[str, str, str, str], tuple[float, int]] = {}
        self._moving: dict[int, asyncio.Future[None]] = {}

    def route(self, name: str, version: str = "", route_key: str | None = None) -> Route:
        model = self.repository.model(name)
        policy = model.fallback
        split = self.releases.split(name) if self.releases is not None and not version else None
        if split is not None:
            released = self._released(model, split, route_key)
            if released is not None:
                return released
        if version:
            served = model.ready_version(version)
            if self._allowed(served):
                return self._marked(model, _plain_route(served))
            return self._instead(model, served, FallbackReason.CIRCUIT_OPEN, allow_model=False)
        newest = model.newest_ready_version()
        if newest is None:
            if policy is not None and policy.allows(FallbackLevel.BUSINESS) and model.max_batch_size >= 0:
                return self._marked(model, Route(None, FallbackLevel.BUSINESS, _why_nothing(model), model))
            newest = model.version("")  # none is ready: the usual 503, with the reasons
        if model.twin is not None:  # the int8 twin or its fp32 version, as this server prefers
            ready = [v.version for v in model.ready_versions]
            newest = model.versions[model.twin.answering(newest.version, ready)]
        if not self._allowed(newest):
            return self._instead(model, newest, FallbackReason.CIRCUIT_OPEN, allow_model=True)
        if newest.stands_in is not None:
            return self._marked(model, Route(newest, FallbackLevel.MODEL, newest.stands_in))
        return self._marked(model, _plain_route(newest))

    def record(
        self, route: Route, error: Exception | None, seconds: float, scheduled: ScheduledRequest | None = None
    ) -> None:
        """The outcome of a routed call, for its version's breaker and, when a release chose it, its gate.

        The breaker, which guards clients, times the whole call. The gate times what the version
        itself spent (:meth:`ScheduledRequest.gate_times`): without its waits for the other version in
        a release's shared line, and with its execution apart."""
        version = route.version
        if version is None or (version.breaker is None and not route.released):
            return  # nothing to tell: the usual case, on every request
        outcome = CallOutcome.of(error)
        if version.breaker is not None:
            version.breaker.record(self.clock(), outcome, seconds)
        if route.released and self.releases is not None and outcome is not CallOutcome.CLIENT_ERROR:
            own, execution = (seconds, None) if scheduled is None else scheduled.gate_times(seconds)
            self.releases.record_answer(
                version.name, version.version, own, outcome is CallOutcome.FAILURE, execution=execution
            )

    def shadow(self, route: Route, request: ScheduledRequest, outputs: Mapping[str, np.ndarray]) -> None:
        """After a release-routed answer: a copy on the release's other version, when the step asks."""
        answered = route.version
        if not route.released or answered is None or self.releases is None or self.shadows is None:
            return
        if request.parameters.get("sequence_id"):
            return  # a copy would run the sequence's step on the other version's state, out of order
        target_number = self.releases.shadow_version(answered.name, answered.version)
        model = self.repository.models.get(answered.name)
        target = model.versions.get(target_number) if model and target_number is not None else None
        if target is not None and target.ready:
            self.shadows.submit(answered, target, request, outputs)

    async def move_to_cpu(self, version: ModelVersion, error: str) -> None:
        """The CPU fallback on a device error: rebuild ``version`` on CPU instances, once.

        Requests failing together wait for the same move, and a request that failed on the GPU after
        the move returns at once, to run again on the CPU. The GPU scheduler is kept aside (its queued
        requests still reach it and fail the same way) and closed with the version.
        """
        if version.fallback_marker == (FallbackLevel.CPU, FallbackReason.DEVICE_ERROR):
            return
        moving = self._moving.get(id(version))
        if moving is None:
            moving = asyncio.ensure_future(self._rebuild_on_cpu(version, error))
            self._moving[id(version)] = moving
        await asyncio.shield(moving)

    def marked_cpu(self, route: Route) -> Route:
        """``route`` as answered by the CPU fallback after a device error."""
        assert route.version is not None
        return self._marked_for(
            route.version, Route(route.version, FallbackLevel.CPU, FallbackReason.DEVICE_ERROR)
        )

    async def _rebuild_on_cpu(self, version: ModelVersion, error: str) -> None:
        factory = version.cpu_fallback
        assert factory is not None
        scheduler = await asyncio.to_thread(factory)
        retired, version.scheduler = version.scheduler, scheduler
        version.cpu_fallback = None
        mark_cpu_fallback(version, FallbackReason.DEVICE_ERROR, error=error[:200])
        if retired is not None:
            version.retired_schedulers.append(retired)

    def _released(self, model: Model, split: tuple[int, int, int], route_key: str | None) -> Route | None:
        """The version a release's weights pick, or the other one when it cannot serve; None: neither."""
        baseline, candidate, weight = split
        chosen = pick(baseline, candidate, weight, route_key)
        for number in (chosen, baseline if chosen == candidate else candidate):
            served = model.versions.get(number)
            if served is not None and served.ready and self._allowed(served):
                return self._marked(model, Route(served, *served.fallback_marker, released=True))
        return None

    def _allowed(self, version: ModelVersion) -> bool:
        return version.breaker is None or version.breaker.allow(self.clock())

    def _instead(
        self, model: Model, failing: ModelVersion, reason: FallbackReason, allow_model: bool
    ) -> Route:
        policy = model.fallback
        if policy is not None and allow_model and policy.allows(FallbackLevel.MODEL):
            for older in reversed(model.fallback_versions(below=failing.version)):
                if self._allowed(older):
                    return self._marked(model, Route(older, FallbackLevel.MODEL, reason))
        if policy is not None and policy.allows(FallbackLevel.BUSINESS):
            return self._marked(model, Route(None, FallbackLevel.BUSINESS, reason, model))
        settings = failing.breaker.settings if failing.breaker else None
        wait = f"; it lets a few calls through again after {settings.open_seconds:g} s" if settings else ""
        raise UnavailableError(
            f"model '{model.name}' version {failing.version} is failing and its circuit breaker is open"
            f"{wait}; add MODEL or BUSINESS to FALLBACK_STRATEGY to answer from elsewhere meanwhile"
        )

    def _marked_for(self, served: ModelVersion, route: Route) -> Route:
        return self._marked(self.repository.models.get(served.name) or Model(served.name), route)

    def _marked(self, model: Model, route: Route) -> Route:
        if route.level is None or route.reason is None:
            return route
        version = str(route.version.version) if route.version else ""
        key = (model.name, version, route.level.value, route.reason.value)
        self.fallbacks[key] += 1
        # One record when a fallback starts, then one per LOG_EVERY_S with the answers since: every
        # answer's own record would flood the log exactly when something is already wrong.
        now = self.clock()
        logged_at, count_then = self._logged_at.get(key, (-LOG_EVERY_S, 0))
        if now - logged_at >= LOG_EVERY_S:
            self._logged_at[key] = (now, self.fallbacks[key])
            emit(
                log,
                "fallback",
                logging.WARNING,
                model=model.name,
                version=version,
                level=route.level.value,
                reason=route.reason.value,
                answers=self.fallbacks[key] - count_then,
            )
        return route


def _plain_route(version: ModelVersion) -> Route:
    """``Route(version, *version.fallback_marker)``, made once per version and marker: a Route is
    immutable, and building one (a frozen dataclass) cost about 0.6 us of every request."""
    made, (level, reason) = version.plain_route, version.fallback_marker
    if made is None or made.version is not version or made.level is not level or made.reason is not reason:
        made = version.plain_route = Route(version, level, reason)
    return made


def _why_nothing(model: Model) -> FallbackReason:
    failed = [v for v in model.versions.values() if not v.ready]
    if any("warm-up" in v.reason or "warmup" in v.reason for v in failed):
        return FallbackReason.WARMUP_FAILED
    return FallbackReason.LOAD_FAILED if failed or model.reason else FallbackReason.NO_VERSION
