"""Each gRPC method's handler, wrapped to count its answer by code and, with a gateway, to admit it.

Why wrap handlers rather than use a server interceptor: ModelInfer calls accepted by
:mod:`~conch.frontends.grpc.acceptors` bypass interceptors, and an interceptor costs a call of its
own per RPC. A wrapper is one coroutine frame around the method; without a gateway it only counts.

``ModelStreamInfer`` is counted once per stream; its messages are admitted one by one by the
servicer (:attr:`InferenceServicer.stream_admission`), so a refused message is an error on the stream
and the stream goes on, as any failed message is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from conch.core.errors import ConchError
from conch.frontends.grpc.status import abort, code_name
from conch.gateway.api_groups import grpc_call
from conch.gateway.gateway import Gateway
from conch.gateway.scopes import Grant

SERVICE = "inference.GRPCInferenceService"


def wrapped_methods(
    methods: dict[str, grpc.RpcMethodHandler], codes: Counter[str], gateway: Gateway | None
) -> dict[str, grpc.RpcMethodHandler]:
    """``methods`` (name -> handler), each counting its final code in ``codes``."""
    wrapped = {}
    for name, handler in methods.items():
        if handler.unary_unary is not None:
            behavior = _unary(name, handler.unary_unary, codes, gateway)
            wrapped[name] = handler._replace(unary_unary=behavior)
        elif handler.stream_stream is not None:
            wrapped[name] = handler._replace(stream_stream=_stream(handler.stream_stream, codes))
        else:
            wrapped[name] = handler
    return wrapped


def _unary(name: str, behavior: Any, codes: Counter[str], gateway: Gateway | None) -> Any:
    if gateway is None:

        async def counted(request: Any, context: Any) -> Any:
            try:
                reply = await behavior(request, context)
            except BaseException:
                codes[code_name(context.code())] += 1
                raise
            codes["OK"] += 1
            return reply

        return counted

    async def admitted(request: Any, context: Any) -> Any:
        try:
            call = grpc_call(name, request)
            try:
                grant, _ = gateway.admit("gRPC", call, metadata_reader(context), peer_of(context))
            except ConchError as exc:
                await abort(context, exc)
                raise
            reply = await behavior(request, context)
            if call.listing and not grant.every_model:
                reply = _visible_only(reply, grant)
        except BaseException:
            codes[code_name(context.code())] += 1
            raise
        codes["OK"] += 1
        return reply

    return admitted


def _stream(behavior: Any, codes: Counter[str]) -> Any:
    async def counted(request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        try:
            async for reply in behavior(request_iterator, context):
                yield reply
        except BaseException:
            codes[code_name(context.code())] += 1
            raise
        codes[code_name(context.code())] += 1

    return counted


def stream_admission(gateway: Gateway) -> Callable[[Any, Any], None]:
    """Admits one message of a ModelStreamInfer stream; raises the ConchError that refuses it."""

    def admit(message: Any, context: Any) -> None:
        gateway.admit(
            "gRPC", grpc_call("ModelStreamInfer", message), metadata_reader(context), peer_of(context)
        )

    return admit


def metadata_reader(context: Any) -> Callable[[str], str | None]:
    """A call's metadata by lowercase key (read from gRPC's core only when first asked)."""
    found: dict[str, str] | None = None

    def read(key: str) -> str | None:
        nonlocal found
        if found is None:
            found = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        return found.get(key)

    return read


def peer_of(context: Any) -> str:
    """The peer's address without its port (``ipv4:127.0.0.1:5000``: ``ipv4:127.0.0.1``)."""
    peer = str(context.peer() or "")
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer


def _visible_only(reply: Any, grant: Grant) -> Any:
    """A listing with only the models ``grant`` may see."""
    if isinstance(reply, pb.RepositoryIndexResponse):
        return pb.RepositoryIndexResponse(models=[m for m in reply.models if grant.may_see(m.name)])
    if isinstance(reply, pb.ModelStatisticsResponse):
        return pb.ModelStatisticsResponse(model_stats=[s for s in reply.model_stats if grant.may_see(s.name)])
    return reply
