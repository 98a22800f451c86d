"""Questions and answers between the supervisor and its worker processes, over a socketpair.

Each message is framed as every message between conch's processes is (``conch_frames.encode_frame``: a
4-byte length and a pickle). Both ends are conch processes started from the same ``conch serve``, so
pickle carries no outside input. A channel serves one direction: one side only :meth:`ask`, the other
only :meth:`answer`.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from conch.backends.python.stub.conch_frames import FRAME_HEADER, encode_frame


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
    writer.write(encode_frame(message))


async def _receive(reader: asyncio.StreamReader) -> Any:
    (length,) = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
    return pickle.loads(await reader.readexactly(length))


@dataclass
class WorkerLink:
    """What a worker process gets from the supervisor: the shared HTTP socket and two channels."""

    index: int
    http_socket: socket.socket
    statistics_requests: ControlChannel  # the supervisor asks this worker for its statistics
    aggregate: ControlChannel  # this worker asks the supervisor for everyone's statistics
