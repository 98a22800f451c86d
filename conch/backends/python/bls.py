"""BLS: a Python model's calls to the server's models, answered on the event loop.

A call arrives as a message naming the model and pointing at its inputs in the model's segment; it
runs through the server's own path (``InferenceServer.infer``, or ``infer_stream`` for
``exec(decoupled=True)``), so it is routed, batched and counted as any request, and its answer goes
back in one of the server's segments. Every call is answered, whatever happens: an error the server
raises comes back as the response's error with its Triton code, and ``timeout`` (microseconds, as
in Triton) gives up on a callee that takes too long.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from conch.backends.python import codes
from conch.backends.python.stub import conch_ipc
from conch.core.errors import ConchError, UnavailableError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.observability import tracing

log = logging.getLogger(__name__)

Inference = Callable[[InferenceRequest], Awaitable[InferenceResponse]]
InferenceStream = Callable[[InferenceRequest], AsyncIterator[InferenceResponse | ConchError]]
T = TypeVar("T")


@dataclass(frozen=True)
class BlsLink:
    """What answering one instance's BLS calls needs: the server's entry points, the instance's
    label for logs, its segments both ways, and its way to send."""

    inference: Inference | None
    inference_stream: InferenceStream | None
    label: str
    segments: conch_ipc.SegmentReader
    pool: conch_ipc.SegmentPool
    send: Callable[[dict[str, Any]], None]


async def answer_bls(message: dict[str, Any], link: BlsLink, parent: Any = None) -> None:
    """A call from the model to a model of the server, answered whatever happens. A decoupled
    call (``exec(decoupled=True)``) gets each response as it comes, then an empty final one.

    ``parent``: the traced execution that made the call; the call is then a span under it."""
    decoupled = bool(message.get("decoupled"))
    reply: dict[str, Any] = {"op": "bls_response", "bls": message["bls"], "final": not decoupled}
    request: InferenceRequest | None = None
    try:
        request = _request(message, link.segments)
        if parent is not None and tracing.tracer is not None:
            request.trace = tracing.bls_request(parent, request.model_name, request.model_version)
        timeout_us = message.get("timeout_us") or 0
        if decoupled:
            await _within(_stream(message["bls"], request, link), request, timeout_us)
        else:
            response = await _within(_answer(request, link), request, timeout_us)
            reply["response"], reply["segment"] = _encode(response, link.pool)
    except ConchError as exc:
        reply["response"] = {"error": (exc.message, codes.code_of_error(exc))}
    except Exception as exc:  # the model must get an answer, never hang
        log.exception("%s: a BLS call failed", link.label)
        reply["response"] = {"error": (f"BLS call failed: {type(exc).__name__}", codes.INTERNAL)}
    finally:
        if message.get("segment"):
            link.send({"op": "release", "segment": message["segment"]})
        if request is not None and request.trace is not None:
            error = (reply.get("response") or {}).get("error")
            request.trace.finish({}, error[0] if error else None)
    if "response" in reply:
        link.send(reply)
    if decoupled:
        link.send({"op": "bls_response", "bls": message["bls"], "final": True, "response": None})


async def _stream(bls: int, request: InferenceRequest, link: BlsLink) -> None:
    if link.inference_stream is None:
        raise UnavailableError("decoupled BLS calls are not available in this server")
    async for answer in link.inference_stream(request):
        reply: dict[str, Any] = {"op": "bls_response", "bls": bls, "final": False}
        if isinstance(answer, ConchError):
            reply["response"] = {"error": (answer.message, codes.code_of_error(answer))}
        else:
            reply["response"], reply["segment"] = _encode(answer, link.pool)
        link.send(reply)


def _request(message: dict[str, Any], segments: conch_ipc.SegmentReader) -> InferenceRequest:
    version = int(message.get("model_version", -1))
    parameters = json.loads(message.get("parameters") or "{}")
    if message.get("correlation_id"):
        parameters["sequence_id"] = message["correlation_id"]
    if message.get("flags", 0) & 1:
        parameters["sequence_start"] = True
    if message.get("flags", 0) & 2:
        parameters["sequence_end"] = True
    return InferenceRequest(
        model_name=message["model_name"],
        model_version="" if version < 0 else str(version),
        id=message.get("request_id", ""),
        inputs=[
            Tensor(ref.name, ref.datatype, segments.view(ref))
            for ref in map(conch_ipc.as_ref, message["inputs"])
        ],
        outputs=[RequestedOutput(name) for name in message["outputs"]],
        parameters=parameters,
    )


async def _answer(request: InferenceRequest, link: BlsLink) -> InferenceResponse:
    if link.inference is None:
        raise UnavailableError("BLS is not available in this server")
    return await link.inference(request)


async def _within(call: Awaitable[T], request: InferenceRequest, timeout_us: int) -> T:
    """``call``, given up after ``timeout_us`` microseconds (Triton's BLS ``timeout``; 0: none)."""
    if timeout_us <= 0:
        return await call
    try:
        return await asyncio.wait_for(call, timeout_us / 1e6)
    except TimeoutError:
        raise UnavailableError(
            f"BLS request to model '{request.model_name}' timed out after {timeout_us} us"
        ) from None


def _encode(response: InferenceResponse, pool: conch_ipc.SegmentPool) -> tuple[dict[str, Any], str | None]:
    segment, refs = pool.write([(t.name, t.data) for t in response.outputs])
    return {"outputs": refs, "parameters": json.dumps(response.parameters or {})}, segment
