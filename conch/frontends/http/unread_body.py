"""A request body the answer did not need is still read off the connection before the answer goes.

Why: conch answers some requests before reading their body (an unknown model's 404, a refused token's
401, a wrong method's 405), so a large body costs nothing to refuse. But with HTTP/1.1 keep-alive the
connection can only carry the client's next request once this body has passed: the server closes a
connection whose answer went before its body had all arrived (``server/connection.py``), and under
uvicorn the rest of the body was parsed as the next request, which broke the connection (about 1
request in 20 on a kept-alive connection after a 404, by ``bench.memory_growth``). So before the
answer is sent, the rest of the body is read and dropped, up to the server's body limit, and the
connection stays open; a body larger than that is not read: the answer says ``Connection: close``.
"""

from __future__ import annotations

from typing import Any

from conch.frontends.http.replies import Receive

CLOSE_HEADER = (b"connection", b"close")


class TrackedReceive:
    """``receive`` that remembers whether the request's body was read to its end."""

    __slots__ = ("_receive", "finished")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.finished = False

    async def __call__(self) -> dict[str, Any]:
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
