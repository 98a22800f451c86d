"""One accepted unary gRPC call served in one task, its answer and its close in one batch.

Why: ``grpc.aio`` runs each call in two tasks (one watching for the client's close, one running the
handler) and waits for four completions from gRPC's core: the call, its message, the answer sent,
and the client's close, each one a wake-up of the event loop through gRPC's poller thread. For a
unary call the close comes with the answer, so conch asks for both in the batch that sends the
answer: one task and three completions. At 32 perf_analyzer clients on the ``tiny`` model, 2 cores,
calls/s rose 1.10x and the server's CPU per call fell to 0.90x against the tree before (paired
medians of 6 rounds, ``python -m bench.grpc_cpu_ab``).

A request that is not a message of the method's type ends INVALID_ARGUMENT with a message saying so
(``grpc.aio`` ends it UNKNOWN with the parser's exception).

What a handler gets: a ``grpc.aio`` servicer context with ``abort``, ``set_code``, ``set_details``,
``set_trailing_metadata``, ``invocation_metadata``, ``peer`` and ``time_remaining``, as conch's
handlers use it. What it does not: ``send_initial_metadata`` before the answer, ``set_compression``
and ``add_done_callback``; and since no task watches for the client's close, a call the client
cancels (or whose deadline passes) runs to its end and its answer is dropped, where ``grpc.aio`` would
cancel the handler. An inference in conch's queue runs either way, so nothing is saved by cancelling
it. A handler that needs those must not be given to
:class:`~conch.frontends.grpc.acceptors.CallAcceptors`; one that is not a coroutine function is
served through ``grpc.aio``'s own functions there.

Like the acceptors, this uses ``grpc.aio`` internals (:data:`CYGRPC_NAMES`); grpcio is pinned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc
from grpc._cython import cygrpc

log = logging.getLogger(__name__)

#: What this module uses of ``grpc.aio``'s Cython core.
CYGRPC_NAMES = (
    "_receive_message",
    "_send_error_status_from_server",
    "_finish_handler_with_unary_response",
    "_ServicerContext",
    "_ServerStoppedError",
    "execute_batch",
    "AbortError",
    "ExecuteBatchError",
    "SendInitialMetadataOperation",
    "SendMessageOperation",
    "SendStatusFromServerOperation",
    "ReceiveCloseOnServerOperation",
)

_NO_FLAGS = 0
_NO_METADATA: tuple[tuple[str, Any], ...] = ()
_OK = grpc.StatusCode.OK.value[0]
_INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
#: The answer to a request whose bytes are not a message of the method's type.
UNPARSABLE = (
    "the request could not be parsed as this method's protobuf message; send the message type the "
    "service definition names (for ModelInfer, inference.ModelInferRequest)"
)


async def serve_unary(
    aio_server: Any, handler: grpc.RpcMethodHandler, rpc_state: Any, loop: asyncio.AbstractEventLoop
) -> None:
    """Receive the call's message, run ``handler`` on it and send its answer, status and close.

    ``aio_server`` is the Cython server the call was accepted from: once it stops running, the answer
    goes out through ``grpc.aio``'s own sending, which refuses to touch a server that has stopped.
    """
    try:
        raw = await cygrpc._receive_message(rpc_state, loop)
        if raw is None:  # the client went away before its message arrived
            return
        deserializer = handler.request_deserializer
        try:
            request = raw if deserializer is None else deserializer(raw)
        except Exception:
            await _end(aio_server, rpc_state, _INVALID_ARGUMENT, UNPARSABLE, (), loop)
            return
        context = cygrpc._ServicerContext(rpc_state, None, None, loop)
        try:
            response = await handler.unary_unary(request, context)
            answer = _answer_ops(response, context, handler)
        except cygrpc.AbortError:  # the handler's abort sent the status
            await _receive_close(aio_server, rpc_state, loop)
            return
        except Exception as exc:
            log.exception("unexpected %s raised by a gRPC handler", type(exc).__name__)
            await _fail_unknown(aio_server, rpc_state, context, exc, loop)
            return
        if not aio_server.is_running():
            await _answer_while_stopping(rpc_state, response, context, handler, loop)
            return
        await cygrpc.execute_batch(rpc_state, answer, loop)
    except cygrpc.ExecuteBatchError:
        pass  # the client cancelled or its deadline passed: there is no one to answer


def _answer_ops(response: Any, context: Any, handler: grpc.RpcMethodHandler) -> tuple[Any, ...]:
    """Initial metadata, the answer, the status and the close: one batch, one completion."""
    code = _code_number(context.code())
    if code == _OK:
        serializer = handler.response_serializer
        payload = response if serializer is None else serializer(response)
    else:  # a handler that set a failing code without aborting: no message, as grpc.aio sends it
        payload = b""
    return (
        cygrpc.SendInitialMetadataOperation(_NO_METADATA, _NO_FLAGS),
        cygrpc.SendMessageOperation(payload, _NO_FLAGS),
        cygrpc.SendStatusFromServerOperation(
            tuple(context.trailing_metadata() or ()), code, context.details() or "", _NO_FLAGS
        ),
        cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS),
    )


def _code_number(code: object) -> int:
    """The number of the code a context holds (None: OK, never set)."""
    if code is None:
        return _OK
    if isinstance(code, grpc.StatusCode):
        return int(code.value[0])
    return code if isinstance(code, int) else _UNKNOWN


async def _receive_close(aio_server: Any, rpc_state: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Wait for the client's close once the status went out alone (an abort, a failure); a server
    that is stopping cancels the call itself."""
    if aio_server.is_running():
        await cygrpc.execute_batch(rpc_state, (cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS),), loop)


async def _fail_unknown(
    aio_server: Any, rpc_state: Any, context: Any, exc: Exception, loop: asyncio.AbstractEventLoop
) -> None:
    """End the call UNKNOWN with the exception's text, as ``grpc.aio`` ends a handler that raised."""
    code = _code_number(context.code())
    trailing = tuple(context.trailing_metadata() or ())
    details = f"Unexpected {type(exc)}: {exc}"
    await _end(aio_server, rpc_state, _UNKNOWN if code == _OK else code, details, trailing, loop)


async def _end(
    aio_server: Any,
    rpc_state: Any,
    code: int,
    details: str,
    trailing: tuple[tuple[str, Any], ...],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """End the call with a failing status and no message, then take the client's close."""
    if not aio_server.is_running():
        return  # the server is stopping: it cancels the calls still open
    initial = cygrpc.SendInitialMetadataOperation(_NO_METADATA, _NO_FLAGS)
    await cygrpc._send_error_status_from_server(rpc_state, code, details, trailing, initial, loop)
    await _receive_close(aio_server, rpc_state, loop)


async def _answer_while_stopping(
    rpc_state: Any,
    response: Any,
    context: Any,
    handler: grpc.RpcMethodHandler,
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Send an answer through ``grpc.aio``'s own function, which checks the server has not stopped."""

    async def answered(request: Any, context: Any) -> Any:
        return response

    with contextlib.suppress(cygrpc._ServerStoppedError):
        await cygrpc._finish_handler_with_unary_response(
            rpc_state, answered, None, context, handler.response_serializer, loop
        )
