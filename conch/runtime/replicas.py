"""``conch serve --workers N``: N worker processes behind the same ports, and a supervisor.

Why: Python's gRPC server spends about half a millisecond of one core per call (measured with a
handler that does nothing), so one process caps gRPC throughput whatever the model. Workers each load
the repository and serve HTTP and gRPC; the kernel spreads connections over them (HTTP through one
shared listening socket, gRPC through ``SO_REUSEPORT``). Batching happens within each worker.

The supervisor serves the metrics port: at each scrape it asks every worker for its statistics and
its own families (contracts, streams, circuit breakers, releases...) and merges them
(:mod:`conch.observability.worker_families`), so Prometheus sees one server. A worker asked for
``/v2/models/stats`` gets the same sum through the supervisor. If a worker dies, the supervisor
stops the others and exits with an error, so an orchestrator restarts the whole server.

Models with ``sequence_batching`` are refused before any worker starts: a sequence's slot and state
live in the process that took its first request, while the kernel may send its next request, on
another connection, to another worker. The check sits here, at start, because with ``--workers`` the
repository is fixed (``--model-control-mode none``), so every model that will ever be served is seen;
a failed start with one message is clearer than N workers each showing the model UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop
from prometheus_client.core import Metric

from conch.core.errors import ConchError
from conch.http_server import HttpServer
from conch.observability.exposition import metrics_app
from conch.observability.metrics import supervisor_registry
from conch.observability.statistics import ModelStatistics, merge_statistics
from conch.observability.worker_families import MergedFamilies, merge_families
from conch.repository.config import parse_config
from conch.runtime.children import Children
from conch.runtime.control_channel import ControlChannel, WorkerLink
from conch.runtime.listening import ServeError, listen
from conch.runtime.model_process import serve
from conch.runtime.settings import ServeSettings

log = logging.getLogger(__name__)


def run_workers(settings: ServeSettings, count: int) -> None:
    """Start ``count`` workers, supervise them until SIGINT/SIGTERM, then stop them all."""
    stateful = sequence_models(settings.repository)
    if stateful:
        raise ServeError(
            f"model(s) {stateful} use sequence_batching, whose sequences live in one process; --workers "
            f"{count} would send a sequence's requests to different processes. Serve them with --workers 1 "
            "(a conch serve of their own), use --proxies N (one model process) for more cores, or remove "
            "them from this repository"
        )
    http_socket = listen(settings.host, settings.http_port, "HTTP")
    metrics_socket = listen(settings.host, settings.metrics_port, "metrics")
    _check_free(settings.host, settings.grpc_port)
    channels: list[tuple[ControlChannel, ControlChannel]] = []
    pids = []
    for index in range(count):
        ask_worker, worker_answers = socket.socketpair()
        worker_asks, answer_worker = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            metrics_socket.close()
            ask_worker.close()
            answer_worker.close()
            link = WorkerLink(index, http_socket, ControlChannel(worker_answers), ControlChannel(worker_asks))
            os._exit(_run_worker(settings, link))
        worker_answers.close()
        worker_asks.close()
        pids.append(pid)
        channels.append((ControlChannel(ask_worker), ControlChannel(answer_worker)))
    http_socket.close()
    # A worker drains for --exit-timeout-secs, then gives gRPC 5 s: past that it is stuck.
    stop_timeout_s = settings.exit_timeout_secs + 15.0
    code = uvloop.run(_supervise(pids, channels, metrics_socket, stop_timeout_s))
    if code:
        raise ServeError("a worker process stopped unexpectedly (see the log above)")


def sequence_models(repository: Path) -> list[str]:
    """The models of ``repository`` whose config.pbtxt has ``sequence_batching``, by name."""
    found = []
    for config_file in sorted(repository.glob("*/config.pbtxt")):
        try:
            config = parse_config(config_file.read_text(encoding="utf-8", errors="replace"))
        except ConchError:
            continue  # the loader reports an unreadable config as the model's reason
        if config.HasField("sequence_batching"):
            found.append(config_file.parent.name)
    return found


def _run_worker(settings: ServeSettings, link: WorkerLink) -> int:
    try:
        serve(settings, link)
    except ServeError as exc:
        log.error("worker %d: %s", link.index, exc)
        return 1
    except BaseException:
        log.exception("worker %d failed", link.index)
        return 1
    return 0


def _check_free(host: str, port: int) -> None:
    # The workers share the gRPC port with SO_REUSEPORT, which would also share it with a stranger.
    probe = listen(host, port, "gRPC")
    probe.close()


async def _supervise(
    pids: list[int],
    channels: list[tuple[ControlChannel, ControlChannel]],
    metrics_socket: socket.socket,
    stop_timeout_s: float,
) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    workers = Children("worker process")
    for pid in pids:
        workers.adopt(pid)

    async def gather_statistics(_question: Any = None) -> list[ModelStatistics]:
        groups = await asyncio.gather(*(ask.ask("statistics") for ask, _ in channels))
        return merge_statistics(groups)

    async def gather_families() -> list[Metric]:
        return merge_families(await asyncio.gather(*(ask.ask("families") for ask, _ in channels)))

    tasks = [asyncio.create_task(answer.answer(gather_statistics)) for _, answer in channels]
    metrics = HttpServer(_summed_metrics_app(gather_statistics, gather_families))
    tasks.append(asyncio.create_task(metrics.serve(sockets=[metrics_socket])))
    ends = [asyncio.create_task(stopping.wait()), asyncio.create_task(workers.exited.wait())]
    await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if workers.exited.is_set() and not stopping.is_set():
        log.error("worker process(es) %s stopped; stopping the others", sorted(workers.codes))
        code = 1
    await workers.stop(signal.SIGTERM, stop_timeout_s)
    metrics.shutdown()
    for task in [*tasks[:-1], *ends]:
        task.cancel()
    await tasks[-1]
    return code


def _summed_metrics_app(
    statistics: Callable[[], Awaitable[list[ModelStatistics]]],
    families: Callable[[], Awaitable[list[Metric]]],
) -> Any:
    """The metrics app over every worker's statistics and own families, merged afresh at each scrape."""
    snapshot: list[ModelStatistics] = []
    merged: list[Metric] = []
    exposition = metrics_app(supervisor_registry(lambda: snapshot, MergedFamilies(lambda: merged)))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            snapshot[:], merged[:] = await asyncio.gather(statistics(), families())
        await exposition(scope, receive, send)

    return app
