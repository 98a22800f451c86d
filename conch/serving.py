"""Runs a repository behind the HTTP, gRPC and metrics ports on one uvloop event loop.

One loop serves all three: requests hop to a worker thread only for the model's own computation, so
there is no per-request process or thread hand-off in the frontends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvloop
from prometheus_client.registry import Collector

from conch import garbage_collection
from conch.busy_poll import poll_when_idle
from conch.control_channel import ControlChannel
from conch.frontends.grpc.grpc_server import create_grpc_server
from conch.frontends.http.app import HttpFrontend
from conch.gateway.server_sources import gateway_for
from conch.http_server import HttpServer
from conch.lifecycle.backend_builders import register_backend_builders
from conch.lifecycle.deep_health import DeepHealth
from conch.lifecycle.drain import drain
from conch.lifecycle.loader import LoadOptions, ModelLoader
from conch.lifecycle.model_control import ControlMode, ControlSettings, ModelControl
from conch.models.circuit_breaker import CircuitBreaker
from conch.models.served_models import ServedModels
from conch.models.strategy import parse_strategy
from conch.observability import tracing
from conch.observability.access_log import enable_access_log
from conch.observability.circuit_metrics import CircuitBreakerCollector
from conch.observability.custom_metrics import CUSTOM_METRICS
from conch.observability.exposition import metrics_app
from conch.observability.fallback_metrics import FallbackCollector
from conch.observability.gateway_metrics import AnswerCodes, RateLimitedCollector, RequestCodesCollector
from conch.observability.inference_log import open_audit_log, open_inference_log
from conch.observability.metrics import create_registry, process_collectors
from conch.observability.release_metrics import ReleaseCollector
from conch.observability.worker_families import own_families
from conch.release import runner as release_runner
from conch.runtime.frontend_count import frontend_count
from conch.runtime.frontend_processes import FrontendStartError, frontends_for
from conch.runtime.settings import ServeSettings, cannot_listen
from conch.server import InferenceServer, ServerOptions
from conch.shared_memory.registry import registry_of
from conch.status_page.sampling import keep_sampling
from conch.usable_cores import usable_cores

if TYPE_CHECKING:
    from conch.streams.service import StreamService

log = logging.getLogger(__name__)


def embedded_repository() -> Path:
    """The example repository shipped inside the package (``examples/model_repository`` in the source)."""
    try:
        return Path(str(resources.files("conch.examples") / "model_repository"))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "examples" / "model_repository"


@dataclass
class WorkerLink:
    """What a worker process gets from the supervisor: the shared HTTP socket and two channels."""

    index: int
    http_socket: socket.socket
    statistics_requests: ControlChannel  # the supervisor asks this worker for its statistics
    aggregate: ControlChannel  # this worker asks the supervisor for everyone's statistics


async def serve(settings: ServeSettings, worker: WorkerLink | None = None) -> None:
    """Load the repository, serve until SIGINT or SIGTERM, then stop cleanly.

    As one of several workers, HTTP comes on the supervisor's socket, gRPC shares its port with the
    other workers (``SO_REUSEPORT``), and the supervisor serves the metrics port.
    """
    count, why = frontend_count(settings, os.environ)
    if settings.frontends is None:
        log.info("frontend processes: %d (%s)", count, why)
    sockets = (
        [] if count else [worker.http_socket if worker else listen(settings.host, settings.http_port, "HTTP")]
    )
    if worker is None:
        sockets.append(listen(settings.host, settings.metrics_port, "metrics"))
    options = LoadOptions(
        default_max_batch_size=settings.default_max_batch_size,
        cpu_cores=max(1, usable_cores() // settings.workers),
        breaker_defaults=settings.circuit_breaker_defaults,
        breakers_on=settings.circuit_breaker,
        fallback_levels=parse_strategy(settings.fallback_strategy, "--fallback-strategy"),
    )
    repository = ServedModels(settings.repository)
    control = ModelControl(repository, ModelLoader(options), control_settings(settings))
    releases, verdicts = release_runner.release_controller(
        repository, control, settings.state_dir, settings.release_store
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
        repository,
        ServerOptions(settings.strict_readiness, settings.server_name, settings.tensor_limits),
        control,
        releases,
    )
    register_backend_builders(control.loader, server, settings.backend_config)
    streams = _stream_service(settings, server)
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
    grpc_address = f"{settings.host}:{settings.grpc_port}"
    grpc_server, frontends = None, None
    try:
        if count:
            frontends = frontends_for(settings, count, server, codes, gateway, journal)
            await frontends.start()
        else:
            grpc_server = create_grpc_server(
                server,
                grpc_address,
                reuse_port=worker is not None,
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
    except FrontendStartError as exc:
        raise ServeError(str(exc)) from None
    log.debug("serve settings: %s", settings)
    log.info("loading model repository %s", settings.repository)
    try:
        # Releases first, so their versions load whatever the policy says.
        await release_runner.take_over(releases, verdicts, settings.release_store_poll_secs)
        control.load_startup()
    except BaseException:
        if frontends is not None:
            await frontends.stop()  # they must not outlive a server that failed to load
        raise
    if worker is None or worker.index == 0:
        print(repository.table(), flush=True)
    deep_health = DeepHealth(server, settings.deep_health)
    access = settings.request_log.access_log
    http_app = HttpFrontend(
        server, settings.http_limits, deep_health, codes.http, gateway, inference_log=journal
    )
    servers = [] if frontends else [HttpServer(http_app, settings.http_limits, access, settings.tls.http)]
    tasks = [] if gateway is None else [asyncio.create_task(gateway.keep_keys_fresh())]
    tasks.append(asyncio.create_task(keep_sampling(server)))  # the status page's recent traffic
    collectors = [*routing_collectors(server), CUSTOM_METRICS, RequestCodesCollector(codes)]
    collectors.append(RateLimitedCollector(gateway.rate_limited if gateway else Counter()))
    if streams is not None:
        collectors.append(streams.collector())
    if worker is None:
        registry = create_registry(server.all_statistics, server.repository_index, collectors)
        servers.append(HttpServer(metrics_app(registry), settings.http_limits, access))
    else:
        server.statistics_source = lambda: worker.aggregate.ask("statistics")
        registry_of(server).refuse(
            "system shared memory cannot be registered with --workers above 1: each worker process "
            "would hold its own regions; serve with --workers 1, or with --frontends N for more cores"
        )
        own = process_collectors(server.repository_index, collectors)
        tasks.append(asyncio.create_task(worker.statistics_requests.answer(_worker_answers(server, own))))
    if access:
        enable_access_log()
    if grpc_server is not None:
        await grpc_server.start()
    if frontends is not None:
        frontends.hub.http_app = http_app
        frontends.open()
    garbage_collection.settle()  # the heap is built: freeze it, so the collector stops walking it
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    if settings.busy_poll_us > 0:
        # With --frontends, only after a lone request (poll_when_idle says why).
        poll_when_idle(
            loop, server.in_flight, settings.busy_poll_us / 1e6, after_lone_only=frontends is not None
        )

    def stop() -> None:
        # Not ready from this turn of the loop on: a probe already read waits for a later turn
        # (each request runs as a task), so none answers 200 after the signal.
        server.stopping = True
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    # Ready as soon as HTTP accepts: the repository is loaded and gRPC already listens.
    server.started = True
    if streams is not None:
        streams.start()
    serving = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, sockets, strict=True)]
    log.info(
        "serving%s: HTTP on %s:%d, gRPC on %s:%d, metrics on %s:%d",
        f" (worker {worker.index})" if worker else "",
        *(settings.host, settings.http_port, settings.host, settings.grpc_port),
        *(settings.host, settings.metrics_port),
    )
    if control.settings.mode is ControlMode.POLL:
        tasks.append(asyncio.create_task(control.poll_forever()))
    tasks.append(asyncio.create_task(release_runner.check_releases(releases)))
    poll_secs = settings.release_store_poll_secs
    tasks.append(asyncio.create_task(release_runner.follow_store(releases, verdicts, poll_secs)))
    waits = [asyncio.create_task(stopping.wait()), *serving]
    if frontends is not None:
        waits.append(asyncio.create_task(frontends.hub.lost.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    if streams is not None:
        await streams.stop(settings.exit_timeout_secs)  # read no more; finish and acknowledge the rest
    await drain(server, settings.exit_timeout_secs)
    server.started = False
    for each in servers:
        each.shutdown()
    if grpc_server is not None:
        await grpc_server.stop(grace=5)
    if frontends is not None:
        await frontends.stop()
    await asyncio.gather(*serving, return_exceptions=True)
    for task in tasks:
        task.cancel()
    repository.close()
    tracing.stop()  # the spans still buffered leave now
    log.info("stopped")
    if frontends is not None and frontends.hub.lost.is_set():
        raise ServeError("a frontend process exited; the server stopped")


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

    def breakers() -> list[tuple[str, str, CircuitBreaker]]:
        return [
            (v.name, str(v.version), v.breaker) for v in server.repository.versions() if v.breaker is not None
        ]

    collectors: list[Collector] = [
        CircuitBreakerCollector(breakers),
        FallbackCollector(lambda: server.router.fallbacks),
    ]
    if server.releases is not None:
        collectors.append(ReleaseCollector(server.releases))
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


def listen(host: str, port: int, what: str) -> socket.socket:
    """A bound, listening socket, so a taken port is one clear error before any model loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(cannot_listen(host, port, what, exc.strerror or "")) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class ServeError(Exception):
    """The server could not start listening, or lost a part it cannot serve without."""


#: How long a thread may hold the GIL before another may take it. Python's default, 5 ms, makes a
#: model's worker thread wait up to 5 ms for the busy event loop each time it needs the GIL to return
#: its outputs; measured here, a 9.4 ms execution took 14.1 ms under load at 5 ms and 9.8 ms at 1 ms.
GIL_SWITCH_INTERVAL_S = 0.0005


def run(settings: ServeSettings, worker: WorkerLink | None = None) -> None:
    """Serve on a fresh uvloop event loop (as one of several workers when ``worker`` is given)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    uvloop.run(serve(settings, worker))
