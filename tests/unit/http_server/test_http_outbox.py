"""The HTTP server's outbox (``conch.http_server.outbox``) on real loopback sockets and uvloop:
answers written during one pass of the loop reach their clients only once the pass is over, in the
order written, and an answer for a connection that closed meanwhile is dropped without harm."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
import uvloop

from conch.http_server.outbox import Outbox


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    each = uvloop.new_event_loop()
    yield each
    each.close()


async def _pair(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Transport, socket.socket]:
    """A server-side transport and the client's socket at the other end of it."""
    ours, theirs = socket.socketpair()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    theirs.setblocking(False)
    return transport, theirs  # type: ignore[return-value]


def _read(client: socket.socket) -> bytes:
    try:
        return client.recv(65536)
    except BlockingIOError:
        return b""


def test_nothing_is_sent_before_the_pass_ends(loop: asyncio.AbstractEventLoop) -> None:
    sent_during_pass: list[bytes] = []

    async def scenario() -> tuple[bytes, bytes]:
        outbox = Outbox(loop)
        (first, first_client), (second, second_client) = await _pair(loop), await _pair(loop)
        outbox.put(first, b"one,")
        outbox.put(second, b"alpha")
        outbox.put(first, b"two")
        sent_during_pass.append(_read(first_client) + _read(second_client))
        await asyncio.sleep(0.05)
        received = _read(first_client), _read(second_client)
        first.close()
        second.close()
        return received

    first_received, second_received = loop.run_until_complete(scenario())
    assert sent_during_pass == [b""]
    assert first_received == b"one,two" and second_received == b"alpha"


def test_flush_sends_what_waits_at_once(loop: asyncio.AbstractEventLoop) -> None:
    async def scenario() -> bytes:
        outbox = Outbox(loop)
        transport, client = await _pair(loop)
        outbox.put(transport, b"last bytes of an answer;")
        outbox.flush()  # as a write that must follow them does
        transport.write(b"the next answer")
        await asyncio.sleep(0.01)
        received = _read(client)
        transport.close()
        return received

    assert loop.run_until_complete(scenario()) == b"last bytes of an answer;the next answer"


def test_an_answer_for_a_closed_connection_is_dropped_and_the_others_still_go(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A client that left before the flush: writing to its closed transport would raise, and lose the
    answers after it."""

    async def scenario() -> bytes:
        outbox = Outbox(loop)
        (gone, _), (kept, kept_client) = await _pair(loop), await _pair(loop)
        gone.abort()
        await asyncio.sleep(0.01)  # its handle closes over the next passes
        outbox.put(gone, b"for a client that left")
        outbox.put(kept, b"for a client still here")
        await asyncio.sleep(0.05)
        received = _read(kept_client)
        kept.close()
        return received

    assert loop.run_until_complete(scenario()) == b"for a client still here"
