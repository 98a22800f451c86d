"""How conch's processes frame their messages: a 4-byte little-endian length, then the pickle.

Every message between conch's processes travels this way: the server and a Python model's process
(:class:`Channel`, and ``conch.backends.python.connection`` on the event loop), the proxies and the
model process, and the replicas' control channel. Only small dictionaries travel here; tensors go
through shared memory (:mod:`conch_ipc`).

This module runs in the server *and* in the model's process, which may be another Python environment:
it imports only the standard library.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from typing import Any

#: Every message between conch's processes: this header (the payload's length), then the pickle.
FRAME_HEADER = _LENGTH = struct.Struct("<I")


class Channel:
    """Length-prefixed pickled messages over a connected socket; ``send`` may be called from any
    thread. Only small dictionaries travel here: tensors go through segments."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            self.sock.sendall(_LENGTH.pack(len(payload)) + payload)

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the other side closed the connection."""
        header = self._exactly(_LENGTH.size)
        if header is None:
            return None
        body = self._exactly(_LENGTH.unpack(header)[0])
        return None if body is None else pickle.loads(body)

    def _exactly(self, count: int) -> bytes | None:
        chunks = []
        while count:
            chunk = self.sock.recv(min(count, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)


def encode_frame(message: Any) -> bytes:
    """One message, or a list of them, as it travels (for writers that send without :class:`Channel`)."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(payload)) + payload


def split_frames(buffer: bytearray) -> list[dict[str, Any]]:
    """The complete messages at the start of ``buffer``, removed from it; a partial one stays. A frame
    may hold a list of messages (a turn's, ``conch.runtime.coalescing``): they come one by one."""
    messages = []
    start = 0
    # Unpickled from a view of the buffer: slicing the bytearray copied each message twice.
    with memoryview(buffer) as view:
        while len(view) - start >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(view, start)
            end = start + _LENGTH.size + length
            if end > len(view):
                break
            found = pickle.loads(view[start + _LENGTH.size : end])
            if type(found) is list:
                messages.extend(found)
            else:
                messages.append(found)
            start = end
    del buffer[:start]
    return messages
