"""The stream consumers of one server process: one per ``streams.yaml`` entry, started once the
repository is loaded and stopped before the server drains.

With ``--workers N`` each worker process runs its own, so N consumers share each group. The server is
not ready while a stream's broker is unreachable: an orchestrator then sees the replica cannot do
its work, and the status page and ``conch_stream_broker_up`` say which stream.
"""

from __future__ import annotations

import asyncio
import logging

from conch.server import InferenceServer
from conch.streams.config import StreamsConfig, consumer_name
from conch.streams.consumer import StreamConsumer
from conch.streams.metrics import StreamCollector
from conch.streams.state import stream_states

log = logging.getLogger(__name__)


class StreamsUnavailable(Exception):
    """``--streams`` was given but redis-py is not installed."""


class StreamService:
    """Builds, runs and stops the consumers of ``config`` for ``server``."""

    def __init__(self, server: InferenceServer, config: StreamsConfig, max_record_bytes: int) -> None:
        try:
            from conch.streams.redis_broker import RedisStream, connect
        except ImportError:
            raise StreamsUnavailable(
                "--streams needs redis-py: pip install 'conch[streams]' (the Docker image has it)"
            ) from None
        self.server = server
        self.client = connect(config)
        name = consumer_name()
        self.consumers = []
        for spec in config.streams:
            stream = RedisStream(self.client, spec, name, config.maxlen, config.broker_address)
            limit = config.max_record_bytes or max_record_bytes
            self.consumers.append(StreamConsumer(server, spec, stream, stream, config, limit, name))
        stream_states(server)[:] = [consumer.state for consumer in self.consumers]
        self._runs: list[asyncio.Task[None]] = []
        self._address = config.broker_address
        self._consumer = name

    def start(self) -> None:
        """Start every consumer on the running loop; the server is ready only while their broker is up."""
        for consumer in self.consumers:
            consumer.state.broker_up = True  # until a call says otherwise: a start is not an outage
            self._runs.append(asyncio.create_task(consumer.run(), name=f"conch-stream-{consumer.spec.input}"))
        self.server.readiness_conditions.append(self.not_ready_reason)
        log.info(
            "reading %d stream(s) from %s as consumer %s: %s",
            len(self.consumers),
            self._address,
            self._consumer,
            ", ".join(f"{c.spec.input} -> {c.spec.model}" for c in self.consumers),
        )

    def collector(self) -> StreamCollector:
        """The ``conch_stream_*`` metrics of these consumers."""
        return StreamCollector(lambda: [consumer.state for consumer in self.consumers])

    def not_ready_reason(self) -> str:
        """The first stream whose broker cannot be reached, or ""."""
        return next((why for c in self.consumers if (why := c.broker_unreachable())), "")

    async def stop(self, timeout_s: float) -> None:
        """Stop reading, finish and acknowledge what was read (for at most ``timeout_s``), disconnect."""
        for consumer in self.consumers:
            consumer.stop()
        if self._runs:
            done, late = await asyncio.wait(self._runs, timeout=max(timeout_s, 0.1))
            for task in late:
                task.cancel()
            await asyncio.gather(*self._runs, return_exceptions=True)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.error("stream consumer failed", exc_info=task.exception())
        await self.client.aclose()
