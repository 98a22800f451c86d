"""Who gets a connection slot when the server is near ``--http-max-connections``: a rule with no I/O.

Far from the cap every connection is taken, whoever holds the others. Near it (over nine tenths),
each client may hold only its share, the cap divided among the clients holding connections now, so
one client cannot take every slot. At the cap, a newcomer takes the slot of the slowest incomplete
request of a client over its share, instead of being refused: 1,000 connections trickling a body at
2 B/s held every slot of a 1,000-slot server and refused every other client for as long as they
lasted; with eviction, they cost a client its own share and no one else's. A connection whose answer
is being computed or written is never evicted, and an idle keep-alive one only after every
incomplete request of that client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

Slot = TypeVar("Slot")


@dataclass(frozen=True)
class Holding(Generic[Slot]):
    """One open connection as the rule sees it."""

    slot: Slot
    client: str
    #: False while an answer is being computed or written for it.
    evictable: bool
    #: True while part of a request has arrived and the rest has not.
    incomplete: bool
    #: Bytes a second its current request has arrived at (incomplete), or how long it has been idle.
    rate: float = 0.0
    idle_secs: float = 0.0


@dataclass(frozen=True)
class Admission(Generic[Slot]):
    """The rule's verdict on a newcomer: admitted or not, and whose slot it takes."""

    admitted: bool
    evict: Slot | None = None
    #: Why a newcomer is refused, for its 503.
    reason: str = ""


def near_cap(connections: int, cap: int) -> bool:
    """True over nine tenths of the cap, where the per-client share applies."""
    return connections > cap - max(1, cap // 10)


def admit(
    newcomer: str, held: Mapping[str, int], total: int, cap: int, others: Callable[[], list[Holding[Slot]]]
) -> Admission[Slot]:
    """Whether a connection from ``newcomer`` may be held beside the ``total`` connections that
    ``held`` counts by client. ``others`` lists them, and is called only when one must make room, so
    a client over its share is refused without a look at every connection."""
    if not near_cap(total + 1, cap):
        return Admission(True)
    share = max(1, cap // (len(held) + (newcomer not in held)))
    if held.get(newcomer, 0) + 1 > share:
        return Admission(False, reason=f"this client holds its share ({share}) of the connections")
    if total + 1 <= cap:
        return Admission(True)
    over = [each for each in others() if each.evictable and held.get(each.client, 0) > share]
    if not over:
        return Admission(False, reason="the server holds every connection it may")
    victim = min(over, key=_eviction_order)
    return Admission(True, evict=victim.slot)


def _eviction_order(holding: Holding[Slot]) -> tuple[int, float]:
    """Slowest incomplete request first, then the longest idle."""
    if holding.incomplete:
        return (0, holding.rate)
    return (1, -holding.idle_secs)
