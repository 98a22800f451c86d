"""Feeds a server's :class:`RecentTraffic` with a snapshot of its statistics every few seconds.

The snapshots are taken beside the request path, on the event loop, from the counters requests
already update; ``conch serve`` runs :func:`keep_sampling` as one of its tasks. With several worker
processes the statistics are every worker's, summed, as ``/v2/models/stats`` reports them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from weakref import WeakKeyDictionary

from conch.observability.recent_traffic import EVERY_S, RecentTraffic, Snapshot, snapshot
from conch.server import InferenceServer

log = logging.getLogger(__name__)

_TRAFFIC: WeakKeyDictionary[InferenceServer, RecentTraffic] = WeakKeyDictionary()


def recent_traffic_of(server: InferenceServer) -> RecentTraffic:
    """The one recent-traffic window of ``server``, shared by its sampler and its status page."""
    traffic = _TRAFFIC.get(server)
    if traffic is None:
        traffic = _TRAFFIC[server] = RecentTraffic()
    return traffic


async def current_snapshot(server: InferenceServer) -> Snapshot:
    """The statistics' counters now (every worker's with ``--workers``)."""
    source = server.statistics_source
    return snapshot(await source() if source is not None else server.all_statistics())


async def keep_sampling(server: InferenceServer, every_s: float = EVERY_S) -> None:
    """Record a snapshot every ``every_s`` seconds, until cancelled."""
    traffic = recent_traffic_of(server)
    while True:
        try:
            traffic.record(time.monotonic(), await current_snapshot(server))
        except Exception:  # a worker that did not answer: the next round tries again
            log.debug("status page: statistics snapshot failed", exc_info=True)
        await asyncio.sleep(every_s)
