"""A request body the answer did not need is still read off the connection before the answer goes.

Why: conch answers some requests before reading their body (an unknown model's 404, a refused token's
401, a wrong method's 405), so a large body costs nothing to refuse. But with HTTP/1.1 keep-alive the
connection can only carry the client's next request once this body has passed: the server closes a
connection whose answer went before its body had all arrived (``server/connection.py``), and under
uvicorn the rest of the body was parsed as the next request, which broke the connection (about 1
request in 20 on a kept-alive connection after a 404, by ``bench.memory_growth``). So before the
answer is sent, the rest of the body is read and dropped, up to :data:`DRAIN_CAP`, and the
connection stays open; a body larger than that is not read: the answer says ``Connection: close``.
Neither is a body the client holds back until it hears ``100 Continue``, which a refused request never
gets. Reading up to the body limit instead (512 MiB) let a client with no credentials make the server
take in 512 MiB for each 401.
"""

from __future__ import annotations

from typing import Any

from conch.frontends.http.replies import Receive, Scope, request_header

CLOSE_HEADER = (b"connection", b"close")
#: The most of an unneeded body read to keep the connection: an inference request of a few hundred
#: kilobytes sent to a misspelt model keeps its connection, and a refusal costs no more than the body
#: the server buffers for any app (``server/exchange.py``'s ``HIGH_WATER``).
DRAIN_CAP = 256 * 1024


class TrackedReceive:
    """``receive`` that remembers whether the request's body was read to its end."""

    __slots__ = ("_receive", "finished", "started")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.finished = False
        #: The app asked for the body (and so a waiting client got its ``100 Continue``).
        self.started = False

    async def __call__(self) -> dict[str, Any]:
        self.started = True
        message = await self._receive()
        if message.get("type") != "http.request" or not message.get("more_body", False):
            self.finished = True
        return message

    async def drain(self, limit: int) -> bool:
        """Read and drop what is left of the body; False when more than ``limit`` bytes remained (the
        connection must then close), True when the body has been read to its end."""
        left = limit
        while not self.finished:
            message = await self()
            left -= len(message.get("body", b""))
            if left < 0:
                return False
        return True


def worth_draining(scope: Scope, tracked: TrackedReceive) -> bool:
    """False when the connection should rather close than read the body: one declared over
    :data:`DRAIN_CAP`, or one the client holds back for a ``100 Continue`` (none came)."""
    declared = request_header(scope, b"content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > DRAIN_CAP:
        return False
    expect = request_header(scope, b"expect")
    return not (expect is not None and expect.lower() == "100-continue" and not tracked.started)
