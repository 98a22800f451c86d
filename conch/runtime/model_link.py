"""A proxy process's end of its link to the model process (see :mod:`conch.runtime.hub`).

Calls wait on futures keyed by a call id; the replies arrive on the event loop as the socket becomes
readable (no thread hop). When the model process goes away, every call still waiting ends with 503
and :attr:`ModelLink.closed` is set, so the proxy stops too.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from itertools import count
from typing import Any

from conch.backends.python.stub.conch_ipc import SegmentPool, SegmentReader
from conch.core.errors import UnavailableError
from conch.core.types import InferenceRequest, InferenceResponse
from conch.runtime.busy_poll import BusyPoll
from conch.runtime.coalescing import CoalescingConnection
from conch.runtime.handoff import error_of, read_response, request_message
from conch.runtime.hub import KEPT_SEGMENTS, LARGEST_KEPT_BYTES, SEGMENT_BYTES
from conch.scheduling.scheduler import RequestsInFlight

_GONE = "the server is stopping"


class ModelLink:
    """Sends requests and relayed calls to the model process and waits for their answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.pool = SegmentPool(f"conch-f{os.getpid()}", SEGMENT_BYTES, SEGMENT_BYTES)
        self.pool.kept_free, self.pool.largest_kept = KEPT_SEGMENTS, LARGEST_KEPT_BYTES
        self.pool.on_drop = lambda name: self.connection.send({"op": "forget", "segment": name})
        self.reader = SegmentReader()
        self.connection: CoalescingConnection = CoalescingConnection(sock, self._message, self._closed)
        self.go = asyncio.Event()
        #: Set when the model process says stop, or goes away.
        self.closed = asyncio.Event()
        self._ids = count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._pieces: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        #: Requests waiting on the model process (what :mod:`conch.runtime.busy_poll` watches here).
        self.in_flight = RequestsInFlight()
        self.poll: BusyPoll | None = None

    def attach(self) -> None:
        self.connection.attach()
        self.connection.send({"op": "hello", "pid": os.getpid()})

    async def infer(
        self, request: InferenceRequest, protocol: str, endpoint: str, route_key: str | None
    ) -> InferenceResponse:
        """``request`` answered by the model process; its error raised as the ConchError it was."""
        message = request_message(self.pool, request)
        message.update(op="infer", protocol=protocol, endpoint=endpoint, route_key=route_key)
        reply = await self._call(message)
        if "error" in reply:
            raise error_of(reply)
        try:
            return read_response(reply, self.reader)
        finally:
            if reply["segment"] is not None:
                self.connection.send({"op": "release", "segment": reply["segment"]})

    def note_refusal(self, status: int) -> None:
        """Tells the model process this proxy refused a request on its own (a body over the
        limit), so ``conch_requests_total`` counts it as one process would."""
        self.connection.send({"op": "refused", "status": status})

    async def grpc(
        self, method: str, payload: bytes, metadata: list[tuple[str, Any]], peer: str
    ) -> dict[str, Any]:
        """A unary call relayed as bytes: the reply's payload, status, details and trailing metadata."""
        return await self._call(
            {"op": "grpc", "method": method, "payload": payload, "metadata": metadata, "peer": peer}
        )

    async def http(self, scope: dict[str, Any], body: bytes) -> AsyncIterator[dict[str, Any]]:
        """A whole HTTP request relayed; yields ``http_start`` then ``http_body`` pieces (or
        ``http_failed``) as the model process's app sends them."""
        async for piece in self._pieces_of({"op": "http", "scope": scope, "body": body}, ("http_failed",)):
            yield piece
            if piece["op"] == "http_body" and not piece["more"]:
                return

    async def stream(
        self, metadata: list[tuple[str, Any]], peer: str, requests: AsyncIterator[bytes]
    ) -> AsyncIterator[dict[str, Any]]:
        """A ModelStreamInfer call relayed: its messages go as they come; yields each
        ``stream_reply`` and, last, the ``stream_end`` with the call's status."""
        call_id = next(self._ids)

        async def forward() -> None:
            async for payload in requests:
                self.connection.send({"op": "stream_message", "id": call_id, "payload": payload})
            self.connection.send({"op": "stream_close", "id": call_id})

        sending = asyncio.get_running_loop().create_task(forward())
        try:
            opened = {"op": "stream_open", "metadata": metadata, "peer": peer}
            async for piece in self._pieces_of(opened, ("stream_end",), call_id):
                yield piece
        finally:
            if not sending.done():  # the client went away: end the model process's side too
                sending.cancel()
                self.connection.send({"op": "stream_close", "id": call_id})

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.closed.is_set():
            raise UnavailableError(_GONE)
        call_id = message["id"] = next(self._ids)
        assert self.connection.loop is not None  # attached, on this loop
        reply = self._waiting[call_id] = self.connection.loop.create_future()
        self.in_flight.enter()
        if self.poll is not None and self.in_flight.count == 1:
            self.poll.server_idle()  # a lone request: poll for its answer
        try:
            self.connection.send(message)
            return await reply
        finally:
            self._waiting.pop(call_id, None)
            self.in_flight.leave()

    async def _pieces_of(
        self, message: dict[str, Any], last: tuple[str, ...], call_id: int = 0
    ) -> AsyncIterator[dict[str, Any]]:
        if self.closed.is_set():
            raise UnavailableError(_GONE)
        call_id = message["id"] = call_id or next(self._ids)
        queue = self._pieces[call_id] = asyncio.Queue()
        try:
            self.connection.send(message)
            while True:
                piece = await queue.get()
                if piece["op"] == "gone":
                    raise UnavailableError(_GONE)
                yield piece
                if piece["op"] in last:
                    return
        finally:
            self._pieces.pop(call_id, None)

    def _message(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op in ("answer", "grpc_reply"):
            waiting = self._waiting.get(message["id"])
            if waiting is not None and not waiting.done():
                waiting.set_result(message)
        elif op == "release":
            self.pool.release(message["segment"])
        elif op == "forget":
            self.reader.forget(message["segment"])
        elif op == "go":
            self.go.set()
        elif op == "stop":
            self.closed.set()
        else:  # the pieces of a relayed HTTP request or stream
            queue = self._pieces.get(message["id"])
            if queue is not None:
                queue.put_nowait(message)

    def _closed(self) -> None:
        self.closed.set()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(UnavailableError(_GONE))
        for queue in self._pieces.values():
            queue.put_nowait({"op": "gone"})

    def close(self) -> None:
        self.connection.detach()
        self.pool.close()
