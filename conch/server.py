"""The in-process server API that every frontend translates to: health, metadata, infer, statistics.

Frontends decode their wire format into :mod:`conch.core.types`, call one method here, and encode the
result. Nothing in this module knows HTTP, JSON or protobuf.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from conch.core.errors import ConchError, InternalError, InvalidArgumentError, UnavailableError
from conch.core.response_stream import ResponseStream
from conch.core.tensor_limits import TensorLimits
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.core.version import VERSION
from conch.lifecycle.load_request import check_unload_parameters, config_override
from conch.lifecycle.model_control import ModelControl
from conch.models.fallback import is_device_error
from conch.models.model import ModelVersion
from conch.models.served_models import ServedModels
from conch.observability import tracing
from conch.observability.statistics import ModelStatistics
from conch.release.controller import ReleaseController, spec_from_body
from conch.repository.config import config_to_json, tensor_metadata
from conch.request_contract import answer_parameters, scheduled_request
from conch.router.release_split import route_key_of
from conch.router.router import VersionRouter
from conch.scheduling.scheduler import RequestsInFlight, ScheduledRequest

log = logging.getLogger(__name__)

EXTENSIONS = [
    "binary_tensor_data",
    "classification",
    "sequence",
    "system_shared_memory",
    "model_configuration",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "parameters",
    "trace",
    "logging",
]


@dataclass(frozen=True)
class ServerOptions:
    """Server-wide behaviour. ``strict_readiness`` is Triton's: ready only when every model is.

    ``server_name`` is the name the server metadata gives (``--server-name``): clients that check for
    ``triton`` there can be told so, while the version stays conch's own.
    """

    strict_readiness: bool = True
    server_name: str = "conch"
    tensor_limits: TensorLimits = field(default_factory=TensorLimits)  # --max-*-elements


class InferenceServer:
    """One repository served: the operations of the KServe V2 protocol and Triton's extensions."""

    def __init__(
        self,
        repository: ServedModels,
        options: ServerOptions | None = None,
        control: ModelControl | None = None,
        releases: ReleaseController | None = None,
    ) -> None:
        self.repository = repository
        self.options = options or ServerOptions()
        #: What loads and unloads models on request (None: the repository never changes).
        self.control = control
        #: The models' releases (None: no release can run, as in a bare test server).
        self.releases = releases
        #: Which version answers each request: release splits, breakers and fallbacks.
        self.router = VersionRouter(repository, releases=releases)
        self.started = False
        #: Set on SIGTERM: not ready, and new inference requests are refused while the rest finish.
        self.stopping = False
        #: Where statistics come from when this process is one of several workers (None: here).
        self.statistics_source: Callable[[], Awaitable[list[ModelStatistics]]] | None = None
        #: Requests inside :meth:`infer` now, any model and protocol (``conch.runtime.busy_poll`` watches it).
        self.in_flight = RequestsInFlight()
        #: More that readiness waits for (a stream's broker): each says why not ready, or "".
        self.readiness_conditions: list[Callable[[], str]] = []

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Triton's repository load: load or reload ``name``, with an optional config override.

        Every refusal starts with Triton's ``failed to load '<name>'``, as clients match it."""
        try:
            override = config_override(parameters)
        except InvalidArgumentError as exc:  # its own class: a refusal of files has its gRPC status
            raise type(exc)(f"failed to load '{name}': {exc.message}") from None
        if self.control is None:
            raise UnavailableError("this server cannot load models: it serves a fixed repository")
        await self.control.load(name, override)

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Triton's repository unload: stop serving ``name`` once its requests are answered."""
        check_unload_parameters(parameters)
        if self.control is None:
            raise UnavailableError("this server cannot unload models: it serves a fixed repository")
        await self.control.unload(name)

    def splits(self, name: str) -> bool:
        """Whether a release decides where ``name``'s unversioned requests go (route keys matter)."""
        return self.releases is not None and name in self.releases.releases

    def release_status(self, name: str) -> dict[str, Any]:
        """``GET /v2/models/{m}/release``: the release's state, weights, gate figures and history."""
        return self._releases().status(name)

    def start_release(self, name: str, body: object) -> dict[str, Any]:
        """``POST /v2/models/{m}/release``: start one from the JSON form of ``release.yaml``."""
        self._releases().start(name, spec_from_body(body))
        return self._releases().status(name)

    def release_action(self, name: str, action: str) -> dict[str, Any]:
        """``POST /v2/models/{m}/release/{promote|rollback|pause|resume}``."""
        self._releases().act(name, action)
        return self._releases().status(name)

    def signed_release_action(self, name: str, action: str, body: dict[str, Any], who: str) -> dict[str, Any]:
        """``POST /v2/models/{m}/release/approve|readmit``, by ``who`` (a token's ``sub``, or "")."""
        return self._releases().signed(name, action, body, who)

    def _releases(self) -> ReleaseController:
        if self.releases is None:
            raise UnavailableError("this server runs no releases")
        return self.releases

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        """Started, and (with strict readiness) every model of the repository READY."""
        return (
            self.started
            and not self.stopping
            and (not self.options.strict_readiness or self.repository.all_ready)
            and not any(condition() for condition in self.readiness_conditions)
        )

    def not_ready_reason(self) -> str:
        """Why :meth:`ready` is false, for the 503 of ``/v2/health/ready``: which models, and the way out.

        An orchestrator's probe only reads the status; the text is for the person wondering why a
        server that answers inferences is never ready.
        """
        if self.stopping:
            return "server is not ready: it is shutting down and finishing the requests it has"
        if not self.started:
            return "server is not ready: it is starting or stopping"
        unmet = next((why for condition in self.readiness_conditions if (why := condition())), "")
        if unmet:
            return f"server is not ready: {unmet}"
        waiting = self.repository.not_ready()
        return (
            f"server is not ready: models not READY: {'; '.join(waiting)}. "
            "Strict readiness, as in Triton, needs every model READY; start conch serve with "
            "--strict-readiness false to be ready while some models are not. The repository index "
            "gives each model's full reason"
        )

    def metadata(self) -> dict[str, Any]:
        """Server metadata: the name (``--server-name``), conch's version and the protocol extensions."""
        return {"name": self.options.server_name, "version": VERSION, "extensions": EXTENSIONS}

    def trace_settings(self, model: str = "", changes: dict[str, Any] | None = None) -> dict[str, Any]:
        """Triton's trace extension: ``model``'s settings (the server's when empty), after ``changes``."""
        if model:
            self.repository.model(model)  # a 404 for an unknown name
        live = tracing.live_settings
        return live.settings(model) if changes is None else live.update(changes, model)

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the version (or, with no version, any version) is READY and, for a model with its
        own readiness (a Python model's ``is_ready()``), says it is ready; unknown names are a 404."""
        model = self.repository.model(name)
        versions = model.ready_versions if not version else [model.version(version)]
        for served in versions:
            if served.ready and (served.reported_readiness is None or (await served.reported_readiness())[0]):
                return True
        return False

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Name, ready versions, platform and tensors, with -1 for the batch dimension."""
        model = self.repository.model(name)
        served = model.ready_version(version)
        config = served.config
        versions = [str(v.version) for v in model.ready_versions] if not version else [str(served.version)]
        return {
            "name": name,
            "versions": versions,
            "platform": config.platform or config.backend,
            "inputs": [tensor_metadata(e, config.max_batch_size > 0) for e in config.input],
            "outputs": [tensor_metadata(e, config.max_batch_size > 0) for e in config.output],
        }

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """The completed config of a version (the newest ready one by default), as Triton's JSON."""
        return config_to_json(self.model_version(name, version).config)

    def model_version(self, name: str, version: str = "") -> ModelVersion:
        """The ready version a request for ``name``/``version`` goes to."""
        return self.repository.model(name).ready_version(version)

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics JSON for one model (and version) or, with no name, all of them.

        With several worker processes, the figures are every worker's, summed.
        """
        if name:
            model = self.repository.model(name)
            versions = (
                [model.version(version)] if version else [model.versions[n] for n in sorted(model.versions)]
            )
        else:
            versions = [
                v for _, m in sorted(self.repository.models.items()) for _, v in sorted(m.versions.items())
            ]
        gathered = await self.statistics_source() if self.statistics_source else self.all_statistics()
        by_version = {(s.name, s.version): s for s in gathered}
        wanted = [by_version.get((v.name, str(v.version))) for v in versions if v.ready]
        return {"model_stats": [stats.to_json() for stats in wanted if stats is not None]}

    def all_statistics(self) -> list[ModelStatistics]:
        """Statistics objects of every loaded version, for the metrics collector."""
        return [v.statistics for m in self.repository.models.values() for v in m.versions.values() if v.ready]

    def repository_index(self, ready_only: bool = False, folders: bool = False) -> list[dict[str, Any]]:
        """Every model and version with its state and reason.

        ``folders``: Triton's index as clients get it, which also names each model folder of the
        repository that is not loaded (explicit mode before its load), by ``name`` alone; left out with
        ``ready_only``. The metrics, which need a version and a state, do without them.
        """
        entries = self.repository.index(ready_only)
        if folders and not ready_only:
            listed = {entry["name"] for entry in entries}
            entries += [{"name": f.name} for f in self.repository.model_folders() if f.name not in listed]
            entries.sort(key=lambda entry: str(entry["name"]))
        return entries

    async def infer(
        self, request: InferenceRequest, admitted: bool = False, endpoint: str = "this endpoint"
    ) -> InferenceResponse:
        """Validate, run on an instance, and record statistics; errors keep their V2 kind.

        ``admitted``: the request is part of one already inside the server (an ensemble's step), so
        it runs even while the server drains, as the request it belongs to was let in. ``endpoint``
        names the caller in the refusal of a decoupled model (which answers through
        :meth:`infer_stream` only), as Triton words it.
        """
        started = time.perf_counter_ns()
        if self.stopping and not admitted:
            raise UnavailableError("server is shutting down; send the request to another replica")
        route = self.router.route(request.model_name, request.model_version, route_key_of(request.parameters))
        served = route.version
        if served is None:
            return route.business_answer(request)
        if served.decoupled:
            raise InvalidArgumentError(
                f"{endpoint} doesn't support models with decoupled transaction policy: model "
                f"'{request.model_name}' may answer any number of times; use gRPC ModelStreamInfer or "
                f"POST /v2/models/{request.model_name}/generate_stream"
            )
        stats = served.statistics
        stats.pending += 1
        self.in_flight.enter()
        error: Exception | None = None
        scheduled: ScheduledRequest | None = None
        try:
            scheduled, checked = scheduled_request(request, served, self.in_flight)
            assert served.scheduler is not None
            try:
                outputs = await served.scheduler.schedule(scheduled)
            except InternalError as exc:
                if not (served.can_move_to_cpu and is_device_error(exc.message)):
                    raise
                await self.router.move_to_cpu(served, exc.message)
                assert served.scheduler is not None
                outputs = await served.scheduler.schedule(scheduled)
                route = self.router.marked_cpu(route)
        except ConchError as exc:
            error = exc
            stats.record_failure(time.perf_counter_ns() - started, _failure_reason(exc))
            raise
        except Exception as exc:
            error = exc
            # The client gets only the exception's type, so the server log must keep the traceback.
            log.exception("model '%s' failed on an unexpected error", request.model_name)
            stats.record_failure(time.perf_counter_ns() - started, "BACKEND")
            raise InternalError(f"model '{request.model_name}' failed: {type(exc).__name__}") from exc
        finally:
            stats.pending -= 1
            self.in_flight.leave()
            # One clock reading serves the breaker, the statistics and the answer's figures.
            elapsed = time.perf_counter_ns() - started
            self.router.record(route, error, elapsed / 1e9, scheduled)
        queue_ns = scheduled.queue_ns
        stats.record_success(elapsed, queue_ns)
        self.router.shadow(route, scheduled, outputs)
        parameters = route.parameters
        if checked is not None:
            parameters = answer_parameters(request, checked, parameters)
        return InferenceResponse(
            model_name=request.model_name,
            model_version=str(served.version),
            id=request.id,
            outputs=[Tensor.of(n, outputs[n]) for n in scheduled.output_names],
            parameters=parameters,
            queue_ns=queue_ns,
            compute_ns=elapsed - queue_ns,
        )

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether requests for ``name`` go to a decoupled model (answered by :meth:`infer_stream`)."""
        model = self.repository.models.get(name)
        try:
            return model is not None and bool(model.ready_versions) and model.ready_version(version).decoupled
        except ConchError:
            return False

    async def infer_stream(
        self, request: InferenceRequest, admitted: bool = False
    ) -> AsyncIterator[InferenceResponse | ConchError]:
        """A decoupled model's responses as it sends them (zero or more, an error among them as a
        ConchError); any other model's one answer.

        The request is validated and scheduled as in :meth:`infer`; the instance is free once the
        model's ``execute`` returns, and the responses keep coming from its response sender.
        """
        started = time.perf_counter_ns()
        route = self.router.route(request.model_name, request.model_version, route_key_of(request.parameters))
        if route.version is None or not route.version.decoupled:
            yield await self.infer(request, admitted)
            return
        if self.stopping and not admitted:
            raise UnavailableError("server is shutting down; send the request to another replica")
        served = route.version
        stats = served.statistics
        stats.pending += 1
        self.in_flight.enter()
        try:
            stream = ResponseStream()
            scheduled, checked = scheduled_request(request, served, self.in_flight, stream)
            assert served.scheduler is not None
            await served.scheduler.schedule(scheduled)
            answers = 0
            async for outputs in stream:
                if isinstance(outputs, ConchError):
                    yield outputs
                    continue
                if isinstance(outputs, Exception):
                    yield InternalError(f"model '{request.model_name}' failed: {type(outputs).__name__}")
                    continue
                wanted = scheduled.output_names
                names = [n for n in wanted if n in outputs] if request.outputs else list(outputs)
                parameters = {} if checked is None else answer_parameters(request, checked, {}, answers == 0)
                answers += 1
                yield InferenceResponse(
                    model_name=request.model_name,
                    model_version=str(served.version),
                    id=request.id,
                    outputs=[Tensor.of(n, outputs[n]) for n in names],
                    parameters=parameters,
                    queue_ns=scheduled.queue_ns,
                    compute_ns=time.perf_counter_ns() - started - scheduled.queue_ns,
                )
        except ConchError as exc:
            stats.record_failure(time.perf_counter_ns() - started, _failure_reason(exc))
            raise
        finally:
            stats.pending -= 1
            self.in_flight.leave()
        stats.record_success(time.perf_counter_ns() - started, scheduled.queue_ns)


def _failure_reason(exc: ConchError) -> str:
    # Triton's nv_inference_request_failure reasons: a request refused before it ran (bad input, a
    # full queue, a queue timeout) is REJECTED; one the model failed on is BACKEND.
    return "BACKEND" if exc.kind.http_status == 500 else "REJECTED"
