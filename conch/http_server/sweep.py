"""The server's once-a-tick look at each connection: a request too slow to arrive (:mod:`pace`), a
client that takes none of its answers, a connection idle too long; and a connection as the admission
rule sees it (:mod:`admission`), and its eviction."""

from __future__ import annotations

import logging

from conch.http_server.admission import Holding
from conch.http_server.connection import BODY, HEAD, IDLE, HttpConnection

log = logging.getLogger("conch.http_server")


def check_time(connection: HttpConnection, now: float) -> None:
    """Cuts ``connection`` off where one of its time limits has passed."""
    elapsed, connection.checked = now - connection.checked, now
    transport, limits = connection.transport, connection.limits
    if transport.is_closing():
        return
    if connection.write_paused and _write_stalled(connection, now):
        log.info("cut off a client that took none of its answers for %g s", limits.write_timeout_secs)
        transport.abort()
        return
    if connection.refused or connection.phase == IDLE:
        idle = connection.answering is None and not connection.waiting
        if idle and now - connection.since > limits.idle_timeout_secs:
            connection.close()
        return
    if connection.held():
        return  # the server stopped reading, not the client: its clocks stand still
    pace = connection.pace
    pace.advance(elapsed, connection.phase == BODY)
    if connection.phase == HEAD:
        late = pace.late_head(limits)
        if late is not None:
            connection.refuse(408, late)
        return
    late = pace.late_body(limits)
    if late is None:
        return
    exchange = connection.parsing
    if exchange is not None and exchange.head_sent:
        exchange.lose()  # the app waiting for the rest of the body hears a disconnect
        connection.close()
        return
    connection.refuse(408, late)


def _write_stalled(connection: HttpConnection, now: float) -> bool:
    """True once the client has taken no byte of its answers for ``write_timeout_secs``."""
    unsent = connection.transport.get_write_buffer_size()
    if unsent < connection.unsent:
        connection.unsent, connection.write_stuck_since = unsent, now
        return False
    return now - connection.write_stuck_since > connection.limits.write_timeout_secs


def holding(connection: HttpConnection, now: float) -> Holding[HttpConnection]:
    """``connection`` for the admission rule: evictable unless an answer is being made for it."""
    answering = connection.answering
    evictable = (
        not connection.refused
        and not connection.waiting
        and (answering is None or (answering is connection.parsing and not answering.head_sent))
    )
    return Holding(
        connection,
        connection.identity,
        evictable,
        connection.phase != IDLE,
        connection.pace.rate(connection.head_bytes),
        now - connection.since,
    )


def evict(connection: HttpConnection) -> None:
    """Gives ``connection``'s slot to another client: an idle one closes, one whose request is still
    arriving is answered 503."""
    if connection.phase == IDLE and connection.answering is None:
        connection.close()
        return
    connection.refuse(
        503,
        "the server is at its connection cap and this request was among the slowest to arrive "
        "(--http-max-connections); retry later",
    )
