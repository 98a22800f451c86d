"""A model and its versions as the server sees them (config, state, instances, statistics), and a
request's :class:`Route` to one of them."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.contracts import Contract
from conch.core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from conch.core.request_validation import RequestRules
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.models.circuit_breaker import CircuitBreaker
from conch.models.fallback import FallbackPolicy, FallbackReason, business_outputs
from conch.models.strategy import FallbackLevel
from conch.observability.statistics import ModelStatistics
from conch.repository.quantized_twin import QuantizedTwin
from conch.scheduling.scheduler import Scheduler


class ModelState(enum.Enum):
    """Triton's model states, as the repository index reports them."""

    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


# Read on every request: a member looked up on its Enum class costs about 0.1 us on Python 3.11.
_READY = ModelState.READY


@dataclass
class ModelVersion:
    """One served version. ``scheduler`` is None unless the version is READY."""

    name: str
    version: int
    config: mc.ModelConfig
    state: ModelState = ModelState.UNAVAILABLE
    reason: str = ""
    scheduler: Scheduler | None = None
    statistics: ModelStatistics = field(init=False)
    #: The server chose ``max_batch_size`` (``--default-max-batch-size``); ``config.pbtxt`` did not set it.
    max_batch_size_completed: bool = False
    #: The version folder's files when it was loaded (:mod:`conch.lifecycle.fingerprint`).
    fingerprint: str = ""
    #: This version's circuit breaker (None: it has none).
    breaker: CircuitBreaker | None = None
    #: The fallback every answer of this version is (``CPU``, ``gpu_unavailable``), or (None, None).
    fallback_marker: tuple[FallbackLevel | None, FallbackReason | None] = (None, None)
    #: Why this earlier version serves in place of newer ones that failed (the ``MODEL`` fallback).
    stands_in: FallbackReason | None = None
    #: Loaded outside the version policy for the ``MODEL`` fallback only: not served on its own.
    standby: bool = False
    #: Builds this version's scheduler on CPU instances, for the ``CPU`` fallback on a device error
    #: (None: the version has no GPU instances, or its strategy has no ``CPU``).
    cpu_fallback: Callable[[], Scheduler] | None = None
    #: A decoupled model (``model_transaction_policy { decoupled: true }``): it answers through a
    #: response stream, any number of times, so only streaming endpoints can serve it.
    decoupled: bool = False
    #: The model's own word on whether it is ready (a Python model's ``is_ready()``), shared and
    #: cached: (ready, why not). None: it has none. Model readiness and deep health follow it.
    reported_readiness: Callable[[], Awaitable[tuple[bool, str]]] | None = None
    #: Schedulers this version no longer uses (its GPU one after the CPU fallback), closed with it.
    retired_schedulers: list[Scheduler] = field(default_factory=list)
    #: The version's data contract (``contract.yaml``), None without one: requests are held to it.
    contract: Contract | None = None
    #: The router's route to this version as it stands (:func:`conch.router.router._plain_route`),
    #: kept here so that a request builds none and an unloaded version takes it with it.
    plain_route: Route | None = field(default=None, init=False, repr=False, compare=False)
    _request_rules: RequestRules | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.statistics = ModelStatistics(self.name, str(self.version))

    @property
    def request_rules(self) -> RequestRules:
        """What request validation reads of ``config``, read on the first request: a served
        version's config no longer changes. Before, each request looked the rules up in a cache keyed
        by the serialized config, which cost about 1 us a request on ``tiny``."""
        rules = self._request_rules
        if rules is None:
            rules = self._request_rules = RequestRules.of(self.config)
        return rules

    @property
    def ready(self) -> bool:
        return self.state is _READY

    @property
    def can_move_to_cpu(self) -> bool:
        """A device error here may be answered on CPU instances: they can be built, or already serve."""
        return self.cpu_fallback is not None or self.fallback_marker == (
            FallbackLevel.CPU,
            FallbackReason.DEVICE_ERROR,
        )

    def close(self) -> None:
        """Stop its schedulers and their instances' threads (the version is no longer served)."""
        for scheduler in [self.scheduler, *self.retired_schedulers]:
            if scheduler is not None:
                scheduler.close()


@dataclass
class Model:
    """A folder of the repository. A model whose config failed has no versions and a ``reason``."""

    name: str
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""
    #: The config the versions were loaded with, to tell on a reload which versions can be kept.
    config_text: str = ""
    #: Unloaded on request: listed in the index, but no longer counted by strict readiness.
    unloaded: bool = False
    #: Why a reload failed while earlier versions kept serving: still READY for strict readiness.
    degraded: str = ""
    #: The fallback policy from the config (None: the config could not be read).
    fallback: FallbackPolicy | None = None
    #: The config's ``max_batch_size`` once completed (-1: unknown, the config failed).
    max_batch_size: int = -1
    #: The config's int8 twin and this server's preference (:mod:`conch.repository.quantized_twin`).
    twin: QuantizedTwin | None = None
    #: Versions a release rejected, kept out whatever the policy says: number -> why.
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def ready_versions(self) -> list[ModelVersion]:
        """The READY versions that serve on their own, oldest first (standbys are not among them)."""
        return [v for _, v in sorted(self.versions.items()) if v.state is _READY and not v.standby]

    def newest_ready_version(self) -> ModelVersion | None:
        """``ready_versions[-1]``, or None when there is none: the router asks on every request, so
        this one sorts nothing and builds no list."""
        newest, newest_number = None, -1
        for number, v in self.versions.items():
            if number > newest_number and v.state is _READY and not v.standby:
                newest, newest_number = v, number
        return newest

    def fallback_versions(self, below: int) -> list[ModelVersion]:
        """READY versions older than ``below``, standbys included, oldest first: the MODEL fallback's."""
        return [v for n, v in sorted(self.versions.items()) if v.ready and n < below]

    @property
    def state(self) -> ModelState:
        return ModelState.READY if self.ready_versions else ModelState.UNAVAILABLE

    def version(self, version: str) -> ModelVersion:
        """The version named ``version`` (any state), or the newest ready one when it is empty."""
        if not version:
            ready = self.ready_versions
            if not ready:
                raise UnavailableError(f"model '{self.name}' has no ready version{self._why()}")
            return ready[-1]
        if not version.isdigit():
            raise InvalidArgumentError(
                f"failed to get model version from specified version string '{version}': a version is a "
                "whole number such as 1, or empty to let the model's version policy choose"
            )
        found = self.versions.get(int(version))
        if found is None and int(version) in self.rejected:
            number = int(version)
            raise NotFoundError(
                f"model '{self.name}' version {number} was rejected: {self.rejected[number]}; it serves "
                f"nothing until re-admitted with `conch release readmit {self.name} {number}` (or "
                "`readmit: true` in a changed release.yaml)"
            )
        if found is None:
            served = ", ".join(str(number) for number in sorted(self.versions)) or "none"
            raise NotFoundError(
                f"Request for unknown model: '{self.name}' version {int(version)} is not found; "
                f"its served versions are {served}"
            )
        return found

    def ready_version(self, version: str) -> ModelVersion:
        """Like :meth:`version`, but a version that is not READY is a 503 saying why."""
        found = self.version(version)
        if not found.ready:
            reason = f": {found.reason}" if found.reason else ""
            raise UnavailableError(f"model '{self.name}' version {found.version} is not ready{reason}")
        return found

    def _why(self) -> str:
        reasons = [self.reason] if self.reason else []
        reasons += [f"version {v.version}: {v.reason}" for _, v in sorted(self.versions.items()) if v.reason]
        return f": {'; '.join(reasons)}" if reasons else ""


@dataclass(frozen=True)
class Route:
    """Where a request goes: a version, or the business default; and the fallback that chose it."""

    version: ModelVersion | None
    level: FallbackLevel | None = None
    reason: FallbackReason | None = None
    model: Model | None = None
    #: Chosen by a release's split: its answer counts for the release's gate.
    released: bool = False

    @property
    def parameters(self) -> dict[str, str]:
        """The response parameters a fallback answer carries (none for a normal answer)."""
        if self.level is None or self.reason is None:
            return {}
        return {"fallback_level": self.level.value, "fallback_reason": self.reason.value}

    def business_outputs(self, rows: int) -> dict[str, np.ndarray]:
        assert self.model is not None and self.model.fallback is not None
        batching = self.model.max_batch_size > 0
        return business_outputs(self.model.fallback.business_default, rows, batching)

    def business_answer(self, request: InferenceRequest) -> InferenceResponse:
        """The BUSINESS fallback's answer to ``request``: the configured default for each row, for the
        outputs asked for."""
        model = self.model
        assert model is not None and model.fallback is not None
        known = model.fallback.business_default
        wanted = [o.name for o in request.outputs] or sorted(known)
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise InvalidArgumentError(
                f"unexpected inference output(s) {unknown} for model '{model.name}'; its outputs are "
                f"{sorted(known)}"
            )
        outputs = self.business_outputs(request.batch_size(model.max_batch_size > 0))
        return InferenceResponse(
            model_name=request.model_name,
            model_version="",
            id=request.id,
            outputs=[Tensor.of(n, outputs[n]) for n in wanted],
            parameters=self.parameters,
        )
