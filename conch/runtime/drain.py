"""Graceful shutdown's first half (``--exit-timeout-secs``), the same with or without proxies."""

from __future__ import annotations

import asyncio
import logging

from conch.server import InferenceServer

log = logging.getLogger(__name__)


async def drain(server: InferenceServer, timeout_secs: float) -> None:
    """Graceful shutdown's first half: the ports stay open while the requests in the server finish.

    Readiness answers 503 at once and new inference requests get a 503, so a load balancer moves
    traffic away, while queued and running requests complete; after ``timeout_secs`` the server
    stops anyway (Triton's ``--exit-timeout-secs``).
    """
    server.stopping = True
    waiting = server.in_flight.count
    log.info("stopping: %d request(s) in flight; waiting up to %.0f s for them", waiting, timeout_secs)
    deadline = asyncio.get_running_loop().time() + timeout_secs
    while server.in_flight.count > 0 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    if server.in_flight.count:
        log.warning(
            "stopping with %d request(s) unfinished after %.0f s", server.in_flight.count, timeout_secs
        )
