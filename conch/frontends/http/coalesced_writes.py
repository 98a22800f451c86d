"""One write to the socket per HTTP answer, not two.

Why: uvicorn writes a response's status line and headers with one ``transport.write`` and its body
with another, and uvloop sends each at once: two ``send`` system calls per answer. On the development
machine (a virtual machine) those two calls were 28 % of the event loop's time at 32 HTTP clients on
the overhead-bound model (py-spy), more than JSON decoding and encoding together. The transport each
connection gets here holds a response head back until the body that follows it in the same turn of
the loop, and sends both in one call. A head with no body after it (a body-less answer, a streamed
one) goes at the end of the turn. Bodies larger than :data:`JOIN_LIMIT` are not copied to join them:
the head goes first, then the body, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: Bodies up to this size are joined to their head (one copy of the body, one system call).
JOIN_LIMIT = 64 * 1024
_END_OF_HEAD = b"\r\n\r\n"


class HeadHoldingTransport:
    """A transport that holds a response head until its body is written (or the turn ends)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= JOIN_LIMIT:
                self._transport.write(held + data)
                return
            self._transport.write(held)
        elif data.endswith(_END_OF_HEAD) and data.startswith(b"HTTP/"):
            self._held = data
            self._loop.call_soon(self._release)
            return
        self._transport.write(data)

    def _release(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._release()
        self._transport.close()

    def write_eof(self) -> None:
        self._release()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return int(self._transport.get_write_buffer_size()) + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        # Everything else (is_closing, get_extra_info, pause_reading, abort...) is the transport's.
        return getattr(self._transport, name)


def holding_heads(protocol: type[Any]) -> type[Any]:
    """``protocol`` (an asyncio protocol class such as uvicorn's) whose transport holds heads."""

    class HeadHoldingProtocol(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(HeadHoldingTransport(transport, asyncio.get_running_loop()))

    HeadHoldingProtocol.__name__ = HeadHoldingProtocol.__qualname__ = f"HeadHolding{protocol.__name__}"
    return HeadHoldingProtocol
