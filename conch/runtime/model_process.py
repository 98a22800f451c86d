"""Runs an assembled model process: HTTP, gRPC and metrics on one uvloop event loop, until a signal.

One loop serves all three: requests hop to a worker thread only for the model's own computation, so
there is no per-request process or thread hand-off in the frontends. :func:`run` takes the parts
:func:`conch.runtime.assembly.assemble` built and starts them in order (proxy processes, the
releases and models, the ports), then stops them in the reverse order.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any

import uvloop

from conch.lifecycle import release_runner
from conch.lifecycle.model_control import ControlMode
from conch.observability import tracing
from conch.observability.access_log import enable_access_log
from conch.runtime import garbage_collection
from conch.runtime.assembly import ModelProcess, assemble
from conch.runtime.busy_poll import poll_when_idle
from conch.runtime.control_channel import WorkerLink
from conch.runtime.drain import drain
from conch.runtime.listening import ServeError
from conch.runtime.proxy_processes import ProxyStartError
from conch.runtime.settings import ServeSettings
from conch.status_page.sampling import keep_sampling

log = logging.getLogger(__name__)

#: How long a thread may hold the GIL before another may take it. Python's default, 5 ms, makes a
#: model's worker thread wait up to 5 ms for the busy event loop each time it needs the GIL to return
#: its outputs; measured here, a 9.4 ms execution took 14.1 ms under load at 5 ms and 9.8 ms at 1 ms.
GIL_SWITCH_INTERVAL_S = 0.0005


def serve(settings: ServeSettings, worker: WorkerLink | None = None) -> None:
    """Assemble and run the model process on a fresh uvloop event loop (as one of several workers when
    ``worker`` is given) until SIGINT or SIGTERM."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    async def assembled_and_run() -> None:
        await run(assemble(settings, worker))

    uvloop.run(assembled_and_run())


async def run(process: ModelProcess) -> None:
    """Load the repository, serve until SIGINT or SIGTERM, then stop cleanly."""
    settings, server, proxies = process.settings, process.server, process.proxies
    try:
        if proxies is not None:
            await proxies.start()
    except ProxyStartError as exc:
        raise ServeError(str(exc)) from None
    log.debug("serve settings: %s", settings)
    log.info("loading model repository %s", settings.repository)
    try:
        # Releases first, so their versions load whatever the policy says.
        await release_runner.take_over(process.releases, process.verdicts, settings.release_store_poll_secs)
        process.control.load_startup()
    except BaseException:
        if proxies is not None:
            await proxies.stop()  # they must not outlive a server that failed to load
        raise
    if process.worker is None or process.worker.index == 0:
        print(server.repository.table(), flush=True)
    tasks = [] if process.gateway is None else [asyncio.create_task(process.gateway.keep_keys_fresh())]
    tasks.append(asyncio.create_task(keep_sampling(server)))  # the status page's recent traffic
    if process.worker is not None and process.worker_answers is not None:
        answering = process.worker.statistics_requests.answer(process.worker_answers)
        tasks.append(asyncio.create_task(answering))
    if settings.request_log.access_log:
        enable_access_log()
    if process.grpc_server is not None:
        await process.grpc_server.start()
    if proxies is not None:
        proxies.open()
    garbage_collection.settle()  # the heap is built: freeze it, so the collector stops walking it
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    if settings.busy_poll_us > 0:
        # With --proxies, only after a lone request (poll_when_idle says why).
        poll_when_idle(
            loop, server.in_flight, settings.busy_poll_us / 1e6, after_lone_only=proxies is not None
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
    if process.streams is not None:
        process.streams.start()
    serving = [asyncio.create_task(each.serve(sockets=[sock])) for each, sock in process.http_servers]
    log.info(
        "serving%s: HTTP on %s:%d, gRPC on %s:%d, metrics on %s:%d",
        f" (worker {process.worker.index})" if process.worker else "",
        *(settings.host, settings.http_port, settings.host, settings.grpc_port),
        *(settings.host, settings.metrics_port),
    )
    if process.control.settings.mode is ControlMode.POLL:
        tasks.append(asyncio.create_task(process.control.poll_forever()))
    tasks.append(asyncio.create_task(release_runner.check_releases(process.releases)))
    poll_secs = settings.release_store_poll_secs
    tasks.append(
        asyncio.create_task(release_runner.follow_store(process.releases, process.verdicts, poll_secs))
    )
    waits = [asyncio.create_task(stopping.wait()), *serving]
    if proxies is not None:
        waits.append(asyncio.create_task(proxies.hub.lost.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    await _stop(process, serving, tasks)
    if proxies is not None and proxies.hub.lost.is_set():
        raise ServeError("a proxy process exited; the server stopped")


async def _stop(
    process: ModelProcess, serving: list[asyncio.Task[None]], tasks: list[asyncio.Task[Any]]
) -> None:
    """Read no more from streams, drain the requests in flight, close the ports, then unload."""
    exit_timeout = process.settings.exit_timeout_secs
    if process.streams is not None:
        await process.streams.stop(exit_timeout)  # finish and acknowledge what was read
    await drain(process.server, exit_timeout)
    process.server.started = False
    for each, _ in process.http_servers:
        each.shutdown()
    if process.grpc_server is not None:
        await process.grpc_server.stop(grace=5)
    if process.proxies is not None:
        await process.proxies.stop()
    await asyncio.gather(*serving, return_exceptions=True)
    for task in tasks:
        task.cancel()
    process.server.repository.close()
    tracing.stop()  # the spans still buffered leave now
    log.info("stopped")
