"""The ports ``conch serve`` opens before any model loads, and the error that stops a start."""

from __future__ import annotations

import socket

from conch.runtime.settings import cannot_listen


class ServeError(Exception):
    """The server could not start listening, or lost a part it cannot serve without."""


def listen(host: str, port: int, what: str) -> socket.socket:
    """A bound, listening socket, so a taken port is one clear error before any model loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(cannot_listen(host, port, what, exc.strerror or "")) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock
