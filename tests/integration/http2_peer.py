"""A bare HTTP/2 peer on a raw socket, for what a gRPC client library hides: the server's SETTINGS,
its pings and its GOAWAY frames, and a peer that goes silent or floods pings.

It speaks only the connection-level frames (RFC 9113 section 6); it never opens a stream, so it needs
no HPACK.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
ACK = 0x1
#: SETTINGS_MAX_CONCURRENT_STREAMS.
MAX_CONCURRENT_STREAMS = 0x3


def frame(kind: int, flags: int = 0, payload: bytes = b"") -> bytes:
    """One frame on stream 0."""
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + bytes(4) + payload


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    payload: bytes
    #: Seconds since the peer connected.
    at: float

    @property
    def goaway_reason(self) -> str:
        """A GOAWAY's debug data: gRPC core names why there (``ping_timeout``, ``max_age``...)."""
        return self.payload[8:].decode("latin-1")


class Http2Peer:
    """Connects to ``port`` on 127.0.0.1 and sends the client preface with empty SETTINGS.

    ``answer_pings``: False plays a peer that vanished (a host gone without a FIN): it acknowledges
    the server's SETTINGS, then never answers a ping.
    """

    def __init__(self, port: int, answer_pings: bool = True) -> None:
        self.answer_pings = answer_pings
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.started = time.monotonic()
        self.frames: list[Frame] = []
        self.closed_at: float | None = None
        self.sock.sendall(PREFACE + frame(SETTINGS))

    def close(self) -> None:
        self.sock.close()

    def read_for(self, seconds: float, until: int | None = None) -> list[Frame]:
        """Read frames for ``seconds``, until the server closes or sends a frame of kind ``until``;
        every frame read so far."""
        deadline = time.monotonic() + seconds
        while self.closed_at is None and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                head = self._exactly(9)
                received = Frame(head[3], head[4], self._exactly(int.from_bytes(head[:3], "big")), 0.0)
            except TimeoutError:
                break
            except (ConnectionError, EOFError):
                self.closed_at = time.monotonic() - self.started
                break
            self.frames.append(
                Frame(received.kind, received.flags, received.payload, time.monotonic() - self.started)
            )
            self._answer(received)
            if received.kind == until:
                break
        return self.frames

    def settings(self) -> dict[int, int]:
        """The server's first SETTINGS, by identifier."""
        self.read_for(5, until=SETTINGS)
        for each in self.frames:
            if each.kind == SETTINGS and not each.flags & ACK:
                pairs = [each.payload[i : i + 6] for i in range(0, len(each.payload), 6)]
                return {struct.unpack(">H", p[:2])[0]: struct.unpack(">I", p[2:])[0] for p in pairs}
        raise AssertionError(f"no SETTINGS from the server: {self.frames}")

    def flood_pings(self, count: int) -> None:
        """``count`` pings at once, as a client that abuses them does."""
        self.sock.sendall(b"".join(frame(PING, 0, index.to_bytes(8, "big")) for index in range(count)))

    def goaways(self) -> list[Frame]:
        return [each for each in self.frames if each.kind == GOAWAY]

    def _answer(self, received: Frame) -> None:
        if received.kind == SETTINGS and not received.flags & ACK:
            self.sock.sendall(frame(SETTINGS, ACK))
        elif received.kind == PING and not received.flags & ACK and self.answer_pings:
            self.sock.sendall(frame(PING, ACK, received.payload))

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data
