"""Complete answers written during one pass of the event loop, sent together once the pass is over.

Why: a batch of 32 requests completes in one pass, and each of its 32 answers used to go out as soon
as its task encoded it, one ``send`` between each task's Python work. Handing them to the kernel back
to back instead cut the server's CPU per request from 56.2 to 52.7 us and raised the requests/s from
17,786 to 18,943 (1.065x, 8 interleaved rounds; ``python -m bench.grpc_cpu_ab BASE NEW --protocol
http_json``, ``tiny``, 32 connections, on the 2-core development VM). The socket writes had been 22%
of the event loop (py-spy); together they took 9.7%. On loopback, each ``send`` also runs the
receiving side's TCP path and wakes the client; sent in a row, the client is still awake for all but
the first. The proxy processes' link holds its messages for the end of the pass the same way
(``conch/runtime/coalescing.py``); there one socket takes them all in one write, here each answer
has its own socket.

A lone request's answer does not wait: with no other request's app running, no other answer can
join it in this pass, and waiting cost it a pass of the loop (``conch serve`` on ``tiny``, one wrk
connection, 5 alternating rounds: p50 175 -> 170 us, 5,465 -> 5,673 requests/s; at 32 connections
CPU per request stayed 52.7 -> 52.4 us, 6 rounds of ``bench.grpc_cpu_ab --protocol http_json``).

Only an answer's last bytes wait here. A streamed answer's earlier chunks are written at once (after
whatever waits here, so that a connection's bytes keep their order), and so feel the transport's
flow control as before. The flush runs with the next pass's callbacks, after that pass has read the
requests that arrived: a few microseconds for a lone client (its p50 did not rise), the reading of up
to a batch's requests under load, where the loop's higher rate more than paid for it (the A/B above).
"""

from __future__ import annotations

import asyncio


class Outbox:
    """The answers of one server waiting for the end of the loop's pass, in the order written."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: list[tuple[asyncio.Transport, bytes]] = []

    def __len__(self) -> int:
        """The answers waiting now."""
        return len(self._waiting)

    def put(self, transport: asyncio.Transport, data: bytes) -> None:
        """``data`` goes to ``transport`` once this pass of the loop is over."""
        if not self._waiting:
            self._loop.call_soon(self.flush)
        self._waiting.append((transport, data))

    def flush(self) -> None:
        """Writes everything waiting now: at the pass's end, or before a write that must follow it."""
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for transport, data in waiting:
            # Closed meanwhile (the client left, the server aborted it): uvloop would raise, and the
            # answers after it in the list would be lost.
            if not transport.is_closing():
                transport.write(data)
