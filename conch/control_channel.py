"""Questions and answers between the supervisor and its worker processes, over a socketpair.

Each message is a 4-byte big-endian length and a pickle. Both ends are conch processes started from
the same ``conch serve``, so pickle carries no outside input. A channel serves one direction: one side
only :meth:`ask`, the other only :meth:`answer`.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

_LENGTH = struct.Struct(">I")


class ControlChannel:
    """One end of a socketpair carrying pickled messages, one exchange at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def ask(self, question: Any) -> Any:
        """Send ``question`` and wait for the answer."""
        async with self._lock:
            reader, writer = await self._open()
            _send(writer, question)
            await writer.drain()
            return await _receive(reader)

    async def answer(self, respond: Callable[[Any], Awaitable[Any]]) -> None:
        """Answer every question with ``respond`` until the other end closes."""
        reader, writer = await self._open()
        while True:
            try:
                question = await _receive(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            _send(writer, await respond(question))
            await writer.drain()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(sock=self._sock)
        return self._streams


def _send(writer: asyncio.StreamWriter, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_LENGTH.pack(len(payload)) + payload)


async def _receive(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))
