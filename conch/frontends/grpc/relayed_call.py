"""What the model process gives conch's gRPC handlers for a call another process relayed (a
frontend of ``--proxies``, or the ``--grpc-relay`` process).

The handlers (the servicer's methods wrapped by the gateway, the answer counter and the inference
log) read a call's metadata and peer, end it with ``abort``, read its final code and set trailing
metadata. This context does those things over what the frontend sent, and keeps what the frontend
must set on the real call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import grpc


class Aborted(Exception):
    """A relayed call ended by :meth:`RelayedContext.abort`."""


class RelayedContext:
    """A relayed call's metadata and peer, and what the handler set on it."""

    def __init__(self, metadata: Sequence[tuple[str, Any]] = (), peer: str = "") -> None:
        self._metadata = tuple(metadata)
        self._peer = peer
        self._code: grpc.StatusCode | None = None
        self.details = ""
        #: Trailing metadata for the real call (the request id echo, ``retry-after``...).
        self.trailing: tuple[tuple[str, Any], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, Any]]) -> None:
        self.trailing = tuple(metadata)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[tuple[str, Any]] = ()
    ) -> NoReturn:
        self._code, self.details = code, details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise Aborted(details)

    def outcome(self) -> dict[str, Any]:
        """The call's end as the frontend applies it: status number, details, trailing metadata."""
        code = self._code or grpc.StatusCode.OK
        return {"status": code.value[0], "details": self.details, "trailing": list(self.trailing)}
