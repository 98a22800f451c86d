"""The model process's parts, built from the serve settings and wired together, before anything runs.

:func:`assemble` opens the ports (so a taken port is one clear error before any model loads) and
builds every part: the table of served models, model control, the releases, the in-process server
with its backend builders, the gateway, logs, streams, the protocol servers or the proxy
processes, the metrics. It starts no task, process or model: :func:`conch.runtime.model_process.run`
does, in order.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client.registry import Collector

from conch.core.usable_cores import usable_cores
from conch.frontends.grpc.grpc_server import create_grpc_server
from conch.frontends.http.app import HttpFrontend
from conch.frontends.http.deep_health import DeepHealth
from conch.gateway.gateway import Gateway
from conch.gateway.server_sources import gateway_for
from conch.http_server import HttpServer
from conch.lifecycle import release_runner
from conch.lifecycle.loader import LoadOptions, ModelLoader
from conch.lifecycle.model_control import ControlMode, ControlSettings, ModelControl
from conch.models.served_models import ServedModels
from conch.models.strategy import parse_strategy
from conch.observability import tracing
from conch.observability.circuit_metrics import BreakerFigures, CircuitBreakerCollector
from conch.observability.custom_metrics import CUSTOM_METRICS
from conch.observability.exposition import metrics_app
from conch.observability.fallback_metrics import FallbackCollector
from conch.observability.gateway_metrics import AnswerCodes, RateLimitedCollector, RequestCodesCollector
from conch.observability.inference_log import InferenceLog, open_audit_log, open_inference_log
from conch.observability.metrics import create_registry, process_collectors
from conch.observability.release_metrics import ReleaseCollector
from conch.observability.worker_families import own_families
from conch.release import metric_figures
from conch.release.controller import ReleaseController
from conch.release.verdict_store import VerdictStore
from conch.runtime.control_channel import WorkerLink
from conch.runtime.listening import ServeError, listen
from conch.runtime.proxy_count import proxy_count
from conch.runtime.proxy_processes import ProxyProcesses, proxies_for
from conch.runtime.server_builders import register_backend_builders
from conch.runtime.settings import ServeSettings, cannot_listen
from conch.server import InferenceServer, ServerOptions
from conch.shared_memory.registry import registry_of

if TYPE_CHECKING:
    from conch.streams.service import StreamService

log = logging.getLogger(__name__)


@dataclass
class ModelProcess:
    """The model process, assembled: its parts, and the ports it will serve on."""

    settings: ServeSettings
    worker: WorkerLink | None
    server: InferenceServer
    control: ModelControl
    releases: ReleaseController
    verdicts: VerdictStore
    gateway: Gateway | None
    streams: StreamService | None
    #: The in-process gRPC server (None with proxy processes).
    grpc_server: grpc.aio.Server | None
    #: The proxy processes owning the public ports (None when this process serves them).
    proxies: ProxyProcesses | None
    #: HTTP servers and the sockets each serves: the public HTTP port (without proxy processes)
    #: and the metrics port (without a supervisor).
    http_servers: list[tuple[HttpServer, socket.socket]] = field(default_factory=list)
    #: A worker's answers to its supervisor's questions (None outside ``--workers``).
    worker_answers: Callable[[object], Awaitable[Any]] | None = None


def assemble(settings: ServeSettings, worker: WorkerLink | None = None) -> ModelProcess:
    """Every part of the model process ``settings`` asks for, as one of several workers when ``worker``
    is given: then HTTP comes on the supervisor's socket, gRPC shares its port with the other workers
    (``SO_REUSEPORT``), and the supervisor serves the metrics port. Must be called on the event loop
    that will run it."""
    count, why = proxy_count(settings, os.environ)
    if settings.proxies is None:
        log.info("proxy processes: %d (%s)", count, why)
    http_socket = (
        None if count else worker.http_socket if worker else listen(settings.host, settings.http_port, "HTTP")
    )
    metrics_socket = listen(settings.host, settings.metrics_port, "metrics") if worker is None else None
    options = LoadOptions(
        default_max_batch_size=settings.default_max_batch_size,
        cpu_cores=max(1, usable_cores() // settings.workers),
        breaker_defaults=settings.circuit_breaker_defaults,
        breakers_on=settings.circuit_breaker,
        fallback_levels=parse_strategy(settings.fallback_strategy, "--fallback-strategy"),
    )
    models = ServedModels(settings.repository)
    control = ModelControl(models, ModelLoader(options), control_settings(settings))
    releases, verdicts = release_runner.release_controller(
        models, control, settings.state_dir, settings.release_store
    )
    releases.identities_verified = settings.gateway.jwt is not None
    if (settings.repository.parent / "source.json").is_file():
        # An s3:// repository: each poll first brings its cache up to date. boto3 is imported only
        # then: its import alone adds about 16,000 objects that every full garbage collection walks.
        from conch.repository.object_cache import mirrored_from

        store = mirrored_from(settings.repository)
        if store is not None:
            control.before_scan = store.poll_refresh
    server = InferenceServer(
        models,
        ServerOptions(settings.strict_readiness, settings.server_name, settings.tensor_limits),
        control,
        releases,
    )
    register_backend_builders(control.loader, server, settings.backend_config)
    streams = _stream_service(settings, server)
    # Before the proxies: whether they decode requests themselves depends on it.
    if tracing.start(settings.tracing, os.environ):
        log.info("tracing inference requests to OTLP/HTTP (%s)", settings.tracing.endpoint or "OTEL_*")
    codes = AnswerCodes()
    try:
        gateway = gateway_for(settings.gateway, server)
        journal = open_inference_log(settings.request_log)
        decisions = journal.audit if journal is not None else None
        if decisions is None and settings.request_log.audit_path:
            decisions = open_audit_log(settings.request_log)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    if decisions is not None:
        release_runner.audit_verdicts(releases, decisions.decision)
    http_app = HttpFrontend(
        server,
        settings.http_limits,
        DeepHealth(server, settings.deep_health),
        codes.http,
        gateway,
        inference_log=journal,
    )
    process = ModelProcess(
        settings, worker, server, control, releases, verdicts, gateway, streams, None, None
    )
    if count:
        process.proxies = proxies_for(settings, count, server, codes, gateway, journal)
        process.proxies.hub.http_app = http_app
    else:
        process.grpc_server = _grpc_server(settings, server, codes, gateway, journal, worker is not None)
        access = settings.request_log.access_log
        assert http_socket is not None
        process.http_servers.append(
            (HttpServer(http_app, settings.http_limits, access, settings.tls.http), http_socket)
        )
    collectors = [*routing_collectors(server), CUSTOM_METRICS, RequestCodesCollector(codes)]
    collectors.append(RateLimitedCollector(gateway.rate_limited if gateway else Counter()))
    if streams is not None:
        collectors.append(streams.collector())
    if metrics_socket is not None:
        registry = create_registry(server.all_statistics, server.repository_index, collectors)
        metrics = HttpServer(metrics_app(registry), settings.http_limits, settings.request_log.access_log)
        process.http_servers.append((metrics, metrics_socket))
    else:
        assert worker is not None
        server.statistics_source = lambda: worker.aggregate.ask("statistics")
        registry_of(server).refuse(
            "system shared memory cannot be registered with --workers above 1: each worker process "
            "would hold its own regions; serve with --workers 1, or with --proxies N for more cores"
        )
        process.worker_answers = _worker_answers(
            server, process_collectors(server.repository_index, collectors)
        )
    return process


def _grpc_server(
    settings: ServeSettings,
    server: InferenceServer,
    codes: AnswerCodes,
    gateway: Gateway | None,
    journal: InferenceLog | None,
    shared_port: bool,
) -> grpc.aio.Server:
    try:
        return create_grpc_server(
            server,
            f"{settings.host}:{settings.grpc_port}",
            reuse_port=shared_port,
            acceptors=settings.grpc_acceptors,
            codes=codes.grpc,
            gateway=gateway,
            max_message_bytes=settings.grpc_max_message_bytes,
            inference_log=journal,
            tls=settings.tls.grpc,
            connection_limits=settings.grpc_connection_limits,
        )
    except RuntimeError:
        raise ServeError(cannot_listen(settings.host, settings.grpc_port, "gRPC")) from None


def _stream_service(settings: ServeSettings, server: InferenceServer) -> StreamService | None:
    """The consumers of ``--streams`` (None without it); redis-py is imported only then."""
    if settings.streams is None:
        return None
    from conch.streams.service import StreamService, StreamsUnavailable

    try:
        return StreamService(server, settings.streams, settings.http_limits.max_body_bytes)
    except StreamsUnavailable as exc:
        raise ServeError(str(exc)) from None


def routing_collectors(server: InferenceServer) -> list[Collector]:
    """The circuit-breaker and fallback families, read from the served versions and the router."""

    def breakers() -> list[BreakerFigures]:
        served = server.repository.versions()
        return [v.breaker.figures(v.name, str(v.version)) for v in served if v.breaker is not None]

    collectors: list[Collector] = [
        CircuitBreakerCollector(breakers),
        FallbackCollector(lambda: server.router.fallbacks),
    ]
    if server.releases is not None:
        releases = server.releases
        collectors.append(
            ReleaseCollector(
                lambda: metric_figures.release_figures(releases),
                lambda: metric_figures.rejected_versions(releases),
            )
        )
    return collectors


def control_settings(settings: ServeSettings) -> ControlSettings:
    """The model control mode and its options, from the serve flags."""
    return ControlSettings(
        mode=ControlMode(settings.model_control_mode),
        poll_secs=settings.repository_poll_secs,
        startup_models=settings.load_models,
        drain_timeout_secs=settings.exit_timeout_secs,
    )


def _worker_answers(server: InferenceServer, own: list[Collector]) -> Callable[[object], Awaitable[Any]]:
    """A worker's answers to the supervisor: its statistics, or (asked ``"families"``) its own families."""

    async def respond(question: object) -> Any:
        return own_families(own) if question == "families" else server.all_statistics()

    return respond
