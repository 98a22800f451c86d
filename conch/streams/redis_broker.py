"""Redis Streams as a :class:`StreamSource` and :class:`StreamSink`, through redis-py's asyncio client.

- a consumer group per input stream (``XGROUP CREATE ... MKSTREAM``, from the stream's first entry);
- new entries with ``XREADGROUP ... >``, this consumer's own unacknowledged ones with ``... 0`` (a
  container restarted in its pod keeps its name), a dead consumer's with ``XAUTOCLAIM``; the delivery
  counts of re-read and claimed entries come from ``XPENDING``;
- results and dead letters with ``XADD ... MAXLEN ~``; acknowledged input entries are left in the
  input stream for its producer to trim (``XADD ... MAXLEN ~`` there), as other groups may read it.

Errors are turned into :class:`BrokerUnavailable` and :class:`SinkUnwritable` with the broker's
address only: the password is never in a message.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conch.streams.broker import BrokerUnavailable, Entry, Outgoing
from conch.streams.config import StreamsConfig, StreamSpec

log = logging.getLogger(__name__)

#: Seconds a call may wait on the broker: a blocking read's wait plus slack; past it the broker is down.
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0
_UNREACHABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


def connect(config: StreamsConfig) -> Redis:
    """A client for ``config.broker`` (no connection is made until the first call).

    No retries inside the client: the consumer loop retries with its own backoff, and reports the
    broker down meanwhile.
    """
    options: dict[str, Any] = {
        "username": config.username,
        "password": config.password,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
    }
    if config.broker.startswith("rediss://") and config.tls_ca_file:
        options["ssl_ca_certs"] = config.tls_ca_file
    return Redis.from_url(config.broker, **options)


def unreachable(address: str, exc: BaseException) -> BrokerUnavailable:
    """The broker error as the loop reports it: the address and the error's class, no more."""
    return BrokerUnavailable(f"broker {address} unreachable ({type(exc).__name__})")


class RedisStream:
    """One spec's input stream (source) and its results and dead-letter streams (sink)."""

    def __init__(self, client: Redis, spec: StreamSpec, consumer: str, maxlen: int, address: str) -> None:
        self.client = client
        self.spec = spec
        self.consumer = consumer
        self.maxlen = maxlen
        self.address = address
        self._claim_cursor = "0-0"

    async def open(self) -> None:
        try:
            await self.client.xgroup_create(self.spec.input, self.spec.group, id="0", mkstream=True)
        except redis_errors.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise BrokerUnavailable(f"cannot create group '{self.spec.group}': {exc}") from None
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None

    async def read_new(self, count: int, block_ms: int) -> list[Entry]:
        return await self._read(">", count, block_ms)

    async def read_own_pending(self, count: int, after: str) -> list[Entry]:
        entries = await self._read(after, count, None)
        return await self._with_deliveries(entries)

    async def claim_stale(self, count: int, idle_ms: int) -> list[Entry]:
        try:
            reply = await self.client.xautoclaim(
                self.spec.input, self.spec.group, self.consumer, idle_ms, self._claim_cursor, count=count
            )
        except redis_errors.ResponseError as exc:
            await self._reopen(exc)
            return []
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None
        cursor, claimed = reply[0], reply[1]
        self._claim_cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        entries = [Entry(_text(i), dict(f)) for i, f in claimed if f is not None]
        return await self._with_deliveries(entries)

    async def acknowledge(self, entry_ids: list[str]) -> None:
        if not entry_ids:
            return
        try:
            await self.client.xack(self.spec.input, self.spec.group, *entry_ids)
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None

    async def lag(self) -> int | None:
        try:
            groups = await self.client.xinfo_groups(self.spec.input)
        except redis_errors.ResponseError:
            return None  # no stream yet
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None
        for group in groups:
            if _text(group.get("name", b"")) == self.spec.group:
                behind = group.get("lag")
                return int(group.get("pending", 0)) + (int(behind) if behind is not None else 0)
        return None

    async def write(self, outgoing: list[Outgoing]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for each in outgoing:
            stream = self.spec.dead_letter if each.dead_letter else self.spec.results
            pipe.xadd(stream, each.fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
        try:
            replies = await pipe.execute(raise_on_error=False)
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None
        written = [not isinstance(reply, Exception) for reply in replies]
        if not all(written):
            failure = next(r for r in replies if isinstance(r, Exception))
            log.warning(
                "stream '%s': %d of %d results or dead letters not written (%s); reading pauses",
                self.spec.input,
                written.count(False),
                len(written),
                str(failure).split("\n")[0][:200],
            )
        return written

    async def _read(self, start: str, count: int, block_ms: int | None) -> list[Entry]:
        try:
            reply: Any = await self.client.xreadgroup(
                self.spec.group, self.consumer, {self.spec.input: start}, count=count, block=block_ms
            )
        except redis_errors.ResponseError as exc:
            await self._reopen(exc)
            return []
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None
        entries: list[Entry] = []
        for _stream, items in reply or []:
            for entry_id, fields in items:
                if fields is None:  # trimmed from the stream while pending: nothing left to answer
                    await self.acknowledge([_text(entry_id)])
                    continue
                entries.append(Entry(_text(entry_id), dict(fields)))
        return entries

    async def _with_deliveries(self, entries: list[Entry]) -> list[Entry]:
        """``entries`` with their delivery counts, read from the group's pending entries."""
        if not entries:
            return entries
        try:
            pending = await self.client.xpending_range(
                self.spec.input,
                self.spec.group,
                min=entries[0].id,
                max=entries[-1].id,
                count=len(entries) * 4,
                consumername=self.consumer,
            )
        except _UNREACHABLE as exc:
            raise unreachable(self.address, exc) from None
        counts = {_text(p["message_id"]): int(p["times_delivered"]) for p in pending}
        for entry in entries:
            entry.deliveries = counts.get(entry.id, entry.deliveries)
        return entries

    async def _reopen(self, exc: redis_errors.ResponseError) -> None:
        # NOGROUP: the broker lost the stream or the group (a restart without persistence, a deleted
        # key); make them again and carry on from what the stream holds now.
        if "NOGROUP" not in str(exc):
            raise BrokerUnavailable(f"broker {self.address} refused a read: {str(exc)[:200]}") from None
        log.warning("stream '%s': group '%s' missing; creating it", self.spec.input, self.spec.group)
        await self.open()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
