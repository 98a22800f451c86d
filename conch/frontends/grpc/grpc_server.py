"""The gRPC server conch runs: the inference servicer registered as one generic handler, each method
counted and admitted through the gateway, and ModelInfer's calls accepted several at once.

The model process of ``--proxies`` answers relayed calls with the same handlers
(:func:`served_methods`), so a call behaves alike whichever process took it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message
from tritonclient.grpc import service_pb2_grpc

from conch.core.errors import ConchError
from conch.frontends.grpc import infer_codec, raw_inputs
from conch.frontends.grpc.acceptors import CallAcceptors
from conch.frontends.grpc.call_admission import SERVICE, stream_admission, wrapped_methods
from conch.frontends.grpc.grpc_options import (
    DEFAULT_ACCEPTORS,
    MAX_MESSAGE_BYTES,
    MODEL_INFER_METHOD,
    GrpcConnectionLimits,
    grpc_server_options,
)
from conch.frontends.grpc.request_log import logged_unary
from conch.frontends.grpc.servicer import InferenceServicer
from conch.frontends.grpc.status import abort, status_of
from conch.frontends.tls import TlsFiles, bind_grpc
from conch.gateway.gateway import Gateway
from conch.observability.inference_log import InferenceLog
from conch.server import InferenceServer


@dataclass
class GrpcFrontend:
    """The gRPC server and the acceptors of its inference calls, started and stopped together."""

    server: grpc.aio.Server
    acceptors: CallAcceptors

    async def start(self) -> None:
        await self.server.start()
        self.acceptors.start()

    async def stop(self, grace: float) -> None:
        await self.server.stop(grace=grace)


def create_grpc_server(
    server: InferenceServer,
    address: str,
    reuse_port: bool = False,
    acceptors: int = DEFAULT_ACCEPTORS,
    codes: Counter[str] | None = None,
    gateway: Gateway | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    inference_log: InferenceLog | None = None,
    tls: TlsFiles | None = None,
    connection_limits: GrpcConnectionLimits | None = None,
) -> GrpcFrontend:
    """A ``grpc.aio`` server bound to ``address`` with the inference service registered (see
    :func:`grpc_server_options` for ``reuse_port`` and ``connection_limits``), accepting up to
    ``acceptors`` ModelInfer calls at once, counting each call's final code in ``codes``, admitting
    calls through ``gateway`` and recording inferences in ``inference_log``, over TLS when ``tls`` is
    on."""
    options = grpc_server_options(reuse_port, max_message_bytes, connection_limits)
    grpc_server = grpc.aio.server(options=options)
    servicer = InferenceServicer(server, stream_admission(gateway) if gateway is not None else None)
    servicer.inference_log = inference_log
    model_infer = register_servicer(grpc_server, servicer, acceptors, codes, gateway)
    bind_grpc(grpc_server, address, tls or TlsFiles())
    return GrpcFrontend(grpc_server, model_infer)


def register_servicer(
    grpc_server: grpc.aio.Server,
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer,
    acceptors: int,
    codes: Counter[str] | None = None,
    gateway: Gateway | None = None,
) -> CallAcceptors:
    """Register ``servicer`` as conch does: one generic handler (as :func:`generic_handlers_only`
    builds), and ``acceptors`` tasks that accept ModelInfer calls (start them once the server has
    started); each method wrapped by :func:`~conch.frontends.grpc.call_admission.wrapped_methods`."""
    methods = served_methods(servicer, codes, gateway)
    grpc_server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    return CallAcceptors(grpc_server, MODEL_INFER_METHOD, methods["ModelInfer"], acceptors)


def served_methods(
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer,
    codes: Counter[str] | None = None,
    gateway: Gateway | None = None,
) -> dict[str, grpc.RpcMethodHandler]:
    """Every method of ``servicer`` by name, as conch serves it: counted, admitted through
    ``gateway`` and, for ModelInfer, recorded in the servicer's inference log. The model process of
    ``--proxies`` answers relayed calls with these same handlers."""
    codes = Counter() if codes is None else codes
    methods = wrapped_methods(_register(servicer).methods, codes, gateway)
    journal = getattr(servicer, "inference_log", None)
    infer = methods["ModelInfer"]
    if journal is not None:  # outside the gateway, so that a call the gateway refuses is recorded too
        infer = infer._replace(unary_unary=logged_unary(infer.unary_unary, journal))
    # Outermost: ModelInfer takes the call's bytes and parses them itself (infer_codec.parse_request),
    # and its answer comes serialized (infer_codec.encode_response_bytes).
    methods["ModelInfer"] = infer._replace(
        request_deserializer=None,
        unary_unary=_parsed(infer.unary_unary, codes),
        response_serializer=_serialized,
    )
    return methods


def _serialized(reply: bytes | Message) -> bytes:
    """A ModelInfer answer as bytes: conch's servicer sends them serialized, a servicer of its own
    (a test's, say) may send the message."""
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


def _parsed(behavior: Any, codes: Counter[str]) -> Any:
    """ModelInfer's handler on the call's bytes: an unparsable request ends INVALID_ARGUMENT, counted."""

    async def parse_then_answer(raw: bytes, context: Any) -> Any:
        try:
            request, split_off = infer_codec.parse_request(raw)
        except ConchError as exc:
            codes[status_of(exc).name] += 1
            await abort(context, exc)
            raise
        if split_off is None:
            return await behavior(request, context)
        held = raw_inputs.SPLIT_OFF.set((request, split_off))
        try:
            return await behavior(request, context)
        finally:
            raw_inputs.SPLIT_OFF.reset(held)

    return parse_then_answer


class _Registrar:
    """Stands in for the server while the generated ``add_..._to_server`` registers the servicer, and
    keeps what it registers."""

    def __init__(self) -> None:
        self.generic: list[grpc.GenericRpcHandler] = []
        self.methods: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.methods.update(handlers)


def _register(servicer: service_pb2_grpc.GRPCInferenceServiceServicer) -> _Registrar:
    registrar = _Registrar()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, registrar)
    return registrar


def generic_handlers_only(
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer,
) -> tuple[grpc.GenericRpcHandler, ...]:
    """The service's handlers as one generic handler, without gRPC's per-method registration.

    Why: ``grpc.aio`` waits for the next call of every registered method at once, with one task each
    and one ``asyncio.wait`` over all of them per call it accepts; the service's 19 methods made that
    wait a tenth of the event loop's time at 32 clients. A generic handler is one pending call and a
    dictionary lookup by method name. (ModelInfer alone is registered again, by
    :class:`~conch.frontends.grpc.acceptors.CallAcceptors`.)
    """
    return tuple(_register(servicer).generic)
