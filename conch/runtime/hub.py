"""The model process's end of the proxy processes' links (``conch serve --proxies N``).

Each proxy process holds one Unix-socket connection here. Over it come:

- ``infer``: a request the proxy decoded (tensors in its shared memory); the answer goes back
  with its tensors in this process's shared memory, to be encoded there;
- ``http``: any other HTTP request, whole, answered by conch's own HTTP app in this process (so the
  gateway, the status page and the management APIs behave exactly as in one process), its answer
  streamed back in pieces;
- ``grpc`` / ``stream_*``: any other gRPC call as protobuf bytes with its metadata, answered by the
  same handlers the in-process gRPC server uses;

Everything stateful stays here: batches form here whatever proxy a request came through, and
model control, shared-memory regions, sequences and releases need no coordination.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc

from conch.backends.python.stub.conch_ipc import SegmentPool, SegmentReader, remove_segments
from conch.core.errors import ConchError, InternalError
from conch.frontends.grpc.relayed_call import Aborted, RelayedContext
from conch.frontends.grpc.status import code_name, status_of
from conch.frontends.inference import answer
from conch.observability.gateway_metrics import AnswerCodes
from conch.runtime.coalescing import CoalescingConnection
from conch.runtime.handoff import error_message, read_request, response_message
from conch.server import InferenceServer
from conch.shared_memory.registry import registry_of
from conch.shared_memory.tensors import RegionLeases

log = logging.getLogger(__name__)

#: The size of a fresh segment for answers; bigger answers get bigger segments.
SEGMENT_BYTES = 1 << 16
#: Free segments each side keeps: about one per request in flight, so none is made per request.
KEPT_SEGMENTS = 32
#: Larger segments (a request of large tensors) are removed once read, so /dev/shm, which is
#: memory and often small in containers, holds at most KEPT_SEGMENTS of this size per side.
LARGEST_KEPT_BYTES = 1 << 20


class ProxyHub:
    """Accepts the proxy processes' connections and answers what they send."""

    def __init__(
        self,
        server: InferenceServer,
        http_app: Any,
        grpc_methods: dict[str, grpc.RpcMethodHandler],
        codes: AnswerCodes,
    ) -> None:
        self.server = server
        self.http_app = http_app
        self.grpc_methods = grpc_methods
        self.codes = codes
        self.links: list[FrontendLink] = []
        #: Set when a proxy's connection closed while the server was not stopping.
        self.lost = asyncio.Event()
        self.stopping = False
        #: Set once the proxies may answer; a proxy lost before is a failed start, reported so.
        self.opened = False
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None

    def listen(self, path: str) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    async def connected(self, count: int) -> None:
        """Returns once ``count`` proxies have connected and said who they are."""
        while sum(1 for link in self.links if link.pid) < count:
            await asyncio.sleep(0.01)

    def open(self) -> None:
        """Let every proxy answer: the models are loaded."""
        self.opened = True
        for link in self.links:
            link.connection.send({"op": "go"})

    def close(self) -> None:
        """Tell every proxy to stop (it finishes what it is answering), and stop accepting."""
        self.stopping = True
        for link in self.links:
            link.connection.send({"op": "stop"})
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listener is not None:
            self._listener.close()

    def forget(self) -> None:
        """Remove every segment either side left (the proxies have exited)."""
        for link in self.links:
            link.close()

    async def _accept(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(self._listener)
            self.links.append(FrontendLink(self, sock, len(self.links)))


class FrontendLink:
    """One proxy process's connection, with the shared memory each side writes into."""

    def __init__(self, hub: ProxyHub, sock: socket.socket, index: int) -> None:
        self.hub = hub
        self.pid = 0
        self.pool = SegmentPool(f"conch-m{os.getpid()}-{index}", SEGMENT_BYTES, SEGMENT_BYTES)
        self.pool.kept_free, self.pool.largest_kept = KEPT_SEGMENTS, LARGEST_KEPT_BYTES
        self.pool.on_drop = lambda name: self.connection.send({"op": "forget", "segment": name})
        self.reader = SegmentReader()
        self.connection: CoalescingConnection = CoalescingConnection(sock, self._message, self._closed)
        self.connection.attach()
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams: dict[int, asyncio.Queue[bytes | None]] = {}

    def close(self) -> None:
        self.connection.detach()
        self.pool.close()
        if self.pid:
            remove_segments(f"conch-f{self.pid}")

    def _message(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "infer":
            self._run(self._infer(message))
        elif op == "release":
            self.pool.release(message["segment"])
        elif op == "forget":
            self.reader.forget(message["segment"])
        elif op == "http":
            self._run(self._http(message))
        elif op == "grpc":
            self._run(self._grpc(message))
        elif op == "stream_open":
            self._streams[message["id"]] = asyncio.Queue()
            self._run(self._stream(message))
        elif op == "stream_message":
            queue = self._streams.get(message["id"])
            if queue is not None:
                queue.put_nowait(message["payload"])
        elif op == "stream_close":
            queue = self._streams.get(message["id"])
            if queue is not None:
                queue.put_nowait(None)
        elif op == "refused":
            self.hub.codes.http[int(message["status"])] += 1
        elif op == "hello":
            self.pid = int(message["pid"])

    def _run(self, work: Any) -> None:
        assert self.connection.loop is not None  # attached, on this loop
        task = self.connection.loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _closed(self) -> None:
        for task in self._tasks:
            task.cancel()
        if not self.hub.stopping and self.hub.opened:
            log.error("proxy process %d went away; stopping the server so it can be restarted", self.pid)
            self.hub.lost.set()

    async def _infer(self, message: dict[str, Any]) -> None:
        http = message["protocol"] == "HTTP"
        leases = RegionLeases(registry_of(self.hub.server))
        try:
            try:
                request = read_request(message, self.reader)
            finally:
                if message["segment"] is not None:
                    self.connection.send({"op": "release", "segment": message["segment"]})
            response = await answer(
                self.hub.server, request, leases, message["endpoint"], message["route_key"]
            )
            reply = response_message(self.pool, response)
            self._count(http, None)
        except ConchError as exc:
            reply = error_message(exc)
            self._count(http, exc)
        except Exception:  # the proxy is answered whatever happens: it waits for this reply
            log.exception("inference on model '%s' failed", message.get("model"))
            error = InternalError("internal server error")
            reply = error_message(error)
            self._count(http, error)
        finally:
            leases.release()
        reply["op"], reply["id"] = "answer", message["id"]
        self.connection.send(reply)

    def _count(self, http: bool, exc: ConchError | None) -> None:
        if http:
            self.hub.codes.http[200 if exc is None else exc.kind.http_status] += 1
        else:
            self.hub.codes.grpc["OK" if exc is None else code_name(status_of(exc))] += 1

    async def _http(self, message: dict[str, Any]) -> None:
        call_id = message["id"]
        body: list[bytes] = [message["body"]]

        async def receive() -> dict[str, Any]:
            if body:
                return {"type": "http.request", "body": body.pop(), "more_body": False}
            await asyncio.Event().wait()  # as a connection that stays open
            return {"type": "http.disconnect"}

        async def send(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.start":
                self.connection.send(
                    {
                        "op": "http_start",
                        "id": call_id,
                        "status": event["status"],
                        "headers": event["headers"],
                    }
                )
            elif event["type"] == "http.response.body":
                more = bool(event.get("more_body", False))
                self.connection.send(
                    {"op": "http_body", "id": call_id, "body": event.get("body", b""), "more": more}
                )

        try:
            await self.hub.http_app(message["scope"], receive, send)
        except Exception:
            log.exception("relayed HTTP request failed")
            self.connection.send({"op": "http_failed", "id": call_id})

    async def _grpc(self, message: dict[str, Any]) -> None:
        handler = self.hub.grpc_methods.get(message["method"])
        context = RelayedContext(message["metadata"], message["peer"])
        payload = b""
        if handler is None or handler.unary_unary is None:
            outcome = {
                "status": grpc.StatusCode.UNIMPLEMENTED.value[0],
                "details": "Method not found!",
                "trailing": [],
            }
        else:
            try:
                # A handler without a deserializer (ModelInfer) parses the call's bytes itself.
                parse = handler.request_deserializer
                request = message["payload"] if parse is None else parse(message["payload"])
                reply = await handler.unary_unary(request, context)
                payload = handler.response_serializer(reply)
            except (Aborted, NotImplementedError):  # the generated base class set UNIMPLEMENTED
                pass
            except Exception:
                log.exception("relayed gRPC call %s failed", message["method"])
                context.set_code(grpc.StatusCode.INTERNAL)
                context.set_details("internal server error")
            outcome = context.outcome()
        self.connection.send({"op": "grpc_reply", "id": message["id"], "payload": payload, **outcome})

    async def _stream(self, message: dict[str, Any]) -> None:
        call_id = message["id"]
        queue = self._streams[call_id]
        handler = self.hub.grpc_methods["ModelStreamInfer"]
        context = RelayedContext(message["metadata"], message["peer"])

        async def requests() -> AsyncIterator[Any]:
            while (payload := await queue.get()) is not None:
                yield handler.request_deserializer(payload)

        try:
            async for reply in handler.stream_stream(requests(), context):
                self.connection.send(
                    {"op": "stream_reply", "id": call_id, "payload": handler.response_serializer(reply)}
                )
        except Aborted:
            pass
        except Exception:
            log.exception("relayed gRPC stream failed")
            context.set_code(grpc.StatusCode.INTERNAL)
            context.set_details("internal server error")
        finally:
            self._streams.pop(call_id, None)
        with contextlib.suppress(Exception):
            self.connection.send({"op": "stream_end", "id": call_id, **context.outcome()})
