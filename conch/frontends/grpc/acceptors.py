"""Several calls of one gRPC method accepted at once, where ``grpc.aio`` accepts them one at a time.

Why: ``grpc.aio`` asks gRPC's core for the next call of a method only once the previous call has
reached the event loop. Each call therefore costs a request to the core, a completion through gRPC's
poller thread and two turns of the event loop *before the next call can be accepted*. When 32 clients
send a burst, the calls wait in the core and are let in one by one, and the loop idles between them.
With a few requests for the next call pending at all times, the core hands over a whole burst at
once. An empty servicer (``python -m bench.grpc_floor``) went from 5,000-5,900 to 9,200-10,450
calls/s at 32 perf_analyzer clients, and a lone call did not get slower.

How: the method is registered with gRPC's core by name (``add_registered_method_handlers``, public
API), and each of ``count`` tasks keeps one request for its next call pending. An accepted call of a
unary coroutine handler (conch's ModelInfer) runs in one task that sends its answer and takes the
client's close in one batch (:mod:`conch.frontends.grpc.unary_call`, which says what it leaves out);
any other call runs exactly as ``grpc.aio`` runs its own, through the same functions of its Cython
core (``_handle_rpc`` inside ``_schedule_rpc_coro``).

Those functions are ``grpc.aio`` internals. CI tests the grpcio of ``constraints.txt`` and
:func:`missing_internals` names any that a different grpcio lacks; the server then accepts calls as
``grpc.aio`` does and logs a warning, so an upgrade can cost speed but never correctness.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

import grpc
from grpc._cython import cygrpc

from conch.frontends.grpc import unary_call

log = logging.getLogger(__name__)

#: What this module uses of ``grpc.aio``'s Cython core (``grpc._cython.cygrpc``).
_CYGRPC_NAMES = (
    "_handle_rpc",
    "_schedule_rpc_coro",
    "_MethodResolver",
    "_RequestCallError",
    "AioServer",
)
_AIO_SERVER_METHODS = ("_request_registered_call", "is_running")


def missing_internals() -> list[str]:
    """The ``grpc.aio`` internals this module needs that the installed grpcio lacks (none for the pin)."""
    names = (*_CYGRPC_NAMES, *unary_call.CYGRPC_NAMES)
    missing = [f"cygrpc.{name}" for name in names if not hasattr(cygrpc, name)]
    aio_server = getattr(cygrpc, "AioServer", None)
    missing += [f"AioServer.{name}" for name in _AIO_SERVER_METHODS if not hasattr(aio_server, name)]
    return missing


class CallAcceptors:
    """``count`` pending requests for the next call of ``method`` on ``grpc_server``.

    Create it before ``grpc_server.start()`` (registering a method needs a server that has not
    started) and call :meth:`start` after. The method's calls must also be served by a generic
    handler: with ``count`` 0, or a grpcio without the internals, nothing is registered here. The
    server must have no interceptors: calls accepted here would bypass them. The tasks end by
    themselves when the server stops.
    """

    def __init__(self, grpc_server: grpc.aio.Server, method: str, handler: grpc.RpcMethodHandler, count: int):
        service, _, name = method.strip("/").partition("/")
        #: The Cython server behind ``grpc.aio.Server``, which takes the requests for calls.
        self._aio_server: Any = getattr(grpc_server, "_server", None)
        missing = missing_internals() + ([] if self._aio_server is not None else ["grpc.aio.Server._server"])
        self.method = method
        #: The name of each accepted call's task (one string for all of them, built once).
        self._call_name = f"call {method}"
        self.count = 0 if missing else count
        #: Calls these tasks accepted (``grpc.aio``'s own request takes the others).
        self.accepted = 0
        self._tasks: set[asyncio.Task[None]] = set()
        if count and missing:
            log.warning("this grpcio lacks %s: gRPC calls are accepted one at a time", ", ".join(missing))
        #: The method's handler when it is a unary-unary coroutine function: each of its calls is one
        #: task (:func:`~conch.frontends.grpc.unary_call.serve_unary`).
        self._unary: grpc.RpcMethodHandler | None = None
        unary = not (handler.request_streaming or handler.response_streaming)
        if unary and inspect.iscoroutinefunction(handler.unary_unary):
            self._unary = handler
        if self.count:  # otherwise the method stays with the server's generic handler, as grpc.aio has it
            grpc_server.add_registered_method_handlers(service, {name: handler})
            self._resolver = cygrpc._MethodResolver([], {method: handler})

    def start(self) -> None:
        """Start the tasks; the server must be started."""
        loop = asyncio.get_running_loop()
        for _ in range(self.count):
            task = loop.create_task(self._accept(loop), name=f"accept {self.method}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _accept(self, loop: asyncio.AbstractEventLoop) -> None:
        aio_server = self._aio_server
        method = self.method.encode()
        # Checked before each request: once the server stops, the core fails every pending request,
        # and a request made after its C server is destroyed would reach freed memory.
        while aio_server.is_running():
            try:
                rpc_state = await aio_server._request_registered_call(method)
            except cygrpc._RequestCallError:
                continue  # a request the core failed: ask again while the server runs
            self.accepted += 1
            if self._unary is not None:
                serving = unary_call.serve_unary(aio_server, self._unary, rpc_state, loop)
                task = loop.create_task(serving, name=self._call_name)
            else:
                call = cygrpc._handle_rpc(self.method, self._resolver, (), rpc_state, loop, False)
                task = loop.create_task(cygrpc._schedule_rpc_coro(call, rpc_state, loop, self.method))
            # The loop keeps only a weak reference to a task; grpc.aio keeps its own calls' tasks too.
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
