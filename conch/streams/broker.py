"""The source and sink boundary between the consumer loop and a broker.

The loop needs five things of a source (open, read new entries, re-read its own pending ones, claim
a dead consumer's, acknowledge) and one of a sink (write results and dead letters, saying which were
written). Redis Streams fills them in ``redis_broker.py``; a Kafka adapter would map them to poll,
the rebalance's assignment (claims need no call there), offset commits and a producer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BrokerUnavailable(Exception):
    """The broker cannot be reached now (refused, reset, timed out); the loop retries with backoff."""


class SinkUnwritable(Exception):
    """The broker is up but refuses to write the results or dead letters (wrong key type, out of
    memory); the loop pauses reading and acknowledges nothing until a write succeeds."""


@dataclass(slots=True)
class Entry:
    """An input entry: its id, its fields, and how many times it has been delivered."""

    id: str
    fields: dict[bytes, bytes]
    deliveries: int = 1


@dataclass(slots=True)
class Outgoing:
    """An entry for the results or the dead-letter stream, answering input entry ``entry_id``."""

    entry_id: str
    fields: dict[bytes, bytes]
    dead_letter: bool


class StreamSource(Protocol):
    """One input stream, read as one consumer of one group."""

    async def open(self) -> None:
        """Create the group (and the stream) when missing; reading starts at the stream's start."""

    async def read_new(self, count: int, block_ms: int) -> list[Entry]:
        """Up to ``count`` entries never delivered to the group, waiting at most ``block_ms``."""

    async def read_own_pending(self, count: int, after: str) -> list[Entry]:
        """Entries after id ``after`` ("0": from the start) delivered to this consumer before and not
        acknowledged: a restarted consumer's unfinished records."""

    async def claim_stale(self, count: int, idle_ms: int) -> list[Entry]:
        """Entries pending with any consumer for ``idle_ms`` or more, now delivered to this one."""

    async def acknowledge(self, entry_ids: list[str]) -> None:
        """Mark the entries done for the group; only after their outgoing entries are written."""

    async def lag(self) -> int | None:
        """The group's pending plus not yet delivered entries (None: the broker cannot tell)."""


class StreamSink(Protocol):
    """Where a stream's results and dead letters go."""

    async def write(self, outgoing: list[Outgoing]) -> list[bool]:
        """Write each entry; one flag per entry, True where it was written. Raises
        :class:`BrokerUnavailable` when none could be tried."""
