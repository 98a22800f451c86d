"""A model process's socket on the event loop: whole messages in, frames out, never blocking.

The loop watches the socket itself (``add_reader``), so a reply reaches the waiting request without a
thread hop; a frame the kernel cannot take at once waits in an outbox flushed when the socket is
writable again. End of file or a socket error means the process is gone: ``on_closed`` is called once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

from conch.backends.python.stub import conch_frames

#: Bytes read at a time. Under the allocator's mmap threshold (128 KiB), so each read's buffer comes
#: from the heap: a 1 MiB read cost an mmap, an mremap and a munmap every time (strace of the model
#: process behind ``--proxies``, ~13 requests a read), where the messages are small dictionaries
#: (tensors travel in segments) and a larger one is read on in more chunks.
_CHUNK = 1 << 16


class LoopConnection:
    """The server's end of one process's socket, attached to the running loop."""

    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[dict[str, Any]], None],
        on_closed: Callable[[], None],
    ) -> None:
        self.sock = sock
        self.loop: asyncio.AbstractEventLoop | None = None
        self._on_message = on_message
        self._on_closed = on_closed
        self._inbox = bytearray()
        self._outbox = bytearray()
        self._closed = False

    def attach(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def detach(self) -> None:
        self._closed = True
        if self.loop is not None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())
                self.loop.remove_writer(self.sock.fileno())
        self._inbox.clear()
        self._outbox.clear()

    def send(self, message: dict[str, Any]) -> None:
        if self._closed:
            return
        frame = conch_frames.encode_frame(message)
        if self._outbox:
            self._outbox += frame
            return
        try:
            sent = self.sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the reader sees the death and fails what is in flight
        if sent < len(frame):
            self._outbox += frame[sent:]
            assert self.loop is not None
            self.loop.add_writer(self.sock.fileno(), self._flush)

    def _readable(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(_CHUNK)
                if not chunk:
                    self._close()
                    return
                self._inbox += chunk
                if len(chunk) < _CHUNK:
                    break
        except BlockingIOError:
            pass
        except OSError:
            self._close()
            return
        for message in conch_frames.split_frames(self._inbox):
            if self._closed:
                return
            self._on_message(message)

    def _flush(self) -> None:
        assert self.loop is not None
        try:
            sent = self.sock.send(self._outbox)
        except BlockingIOError:
            return
        except OSError:
            self.loop.remove_writer(self.sock.fileno())
            return
        del self._outbox[:sent]
        if not self._outbox:
            self.loop.remove_writer(self.sock.fileno())

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_closed()
