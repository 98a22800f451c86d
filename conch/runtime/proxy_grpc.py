"""A proxy process's gRPC server: ModelInfer decoded and encoded here, every other call relayed.

A ModelInfer call is decoded into a request in this process, answered by the model process through
shared memory and encoded here with conch's gRPC codec. Every other call — the management methods,
ModelStreamInfer (decoupled models included), and a ModelInfer that names a client's shared-memory
region or does not decode — goes to the model process as protobuf bytes with its metadata and
peer, answered there by the handlers the in-process server uses; its status, details and trailing
metadata come back. With the gateway, inference logs or traces on, every call is relayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from conch.core.errors import ConchError
from conch.frontends.grpc import infer_codec
from conch.frontends.grpc.acceptors import CallAcceptors
from conch.frontends.grpc.call_admission import SERVICE
from conch.frontends.grpc.grpc_options import MODEL_INFER_METHOD, GrpcConnectionLimits, grpc_server_options
from conch.frontends.grpc.status import STATUS_BY_NUMBER, abort
from conch.frontends.tls import TlsFiles, bind_grpc
from conch.router.release_split import ROUTE_KEY_HEADER
from conch.runtime.model_link import ModelLink
from conch.runtime.proxy_http import RegionsElsewhere

_METHODS = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods


class FrontendServicer:
    """The gRPC methods of one proxy process, as handlers over raw bytes."""

    def __init__(self, link: ModelLink, decode_here: bool) -> None:
        self.link = link
        self.decode_here = decode_here

    def handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in _METHODS:
            if method.client_streaming or method.server_streaming:
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(self._stream)
            elif method.name == "ModelInfer" and self.decode_here:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(self._infer)
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(self._relayer(method.name))
        return handlers

    async def _infer(self, payload: bytes, context: Any) -> bytes:
        try:
            message, split_off = infer_codec.parse_request(payload)
            request = infer_codec.decode_request(message, RegionsElsewhere(), split_off)
        except Exception:  # a region, or a bad request: the model process answers it as in one process
            return await self._relay("ModelInfer", payload, context)
        try:
            response = await self.link.infer(request, "gRPC", "ModelInfer RPC", _route_key(context))
        except ConchError as exc:  # counted by the model process
            await abort(context, exc)
            raise
        return infer_codec.encode_response_bytes(response, request)

    def _relayer(self, name: str) -> Any:
        async def relayed(payload: bytes, context: Any) -> bytes:
            return await self._relay(name, payload, context)

        return relayed

    async def _relay(self, name: str, payload: bytes, context: Any) -> bytes:
        try:
            outcome = await self.link.grpc(name, payload, _metadata(context), context.peer())
        except ConchError as exc:
            await abort(context, exc)
            raise
        await _finish(context, outcome)
        return bytes(outcome["payload"])

    async def _stream(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        try:
            async for piece in self.link.stream(_metadata(context), context.peer(), requests):
                if piece["op"] == "stream_reply":
                    yield piece["payload"]
                else:
                    await _finish(context, piece)
        except ConchError as exc:
            await abort(context, exc)


async def _finish(context: Any, outcome: dict[str, Any]) -> None:
    """Apply a relayed call's trailing metadata and status to the real call (aborting on an error)."""
    if outcome["trailing"]:
        context.set_trailing_metadata(tuple(tuple(pair) for pair in outcome["trailing"]))
    if outcome["status"]:
        await context.abort(STATUS_BY_NUMBER[outcome["status"]], outcome["details"])


def _metadata(context: Any) -> list[tuple[str, Any]]:
    return [(key, value) for key, value in context.invocation_metadata() or ()]


def _route_key(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == ROUTE_KEY_HEADER:
            return str(value)
    return None


def create_proxy_grpc(
    link: ModelLink,
    address: str,
    decode_here: bool,
    acceptors: int,
    max_message_bytes: int,
    tls: TlsFiles,
    connection_limits: GrpcConnectionLimits | None = None,
) -> tuple[grpc.aio.Server, CallAcceptors]:
    """This proxy's gRPC server on ``address``, sharing the port with the others (``SO_REUSEPORT``)."""
    server = grpc.aio.server(options=grpc_server_options(True, max_message_bytes, connection_limits))
    handlers = FrontendServicer(link, decode_here).handlers()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    model_infer = CallAcceptors(server, MODEL_INFER_METHOD, handlers["ModelInfer"], acceptors)
    bind_grpc(server, address, tls)
    return server, model_infer
