"""``inference.GRPCInferenceService`` on ``grpc.aio``: each RPC is one call into the server API.

Errors leave through :func:`_abort` only, which maps a :class:`ConchError` kind to its status code.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from conch.core.errors import ConchError, InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse
from conch.frontends.grpc import infer_codec
from conch.frontends.grpc.request_log import logged_stream
from conch.frontends.grpc.status import abort, status_of
from conch.frontends.grpc.streaming import answer_concurrently
from conch.frontends.inference import answer as answer_request
from conch.observability import log_settings, tracing
from conch.observability.inference_log import InferenceLog, note_error, note_request, note_response
from conch.observability.tracing import RequestTrace
from conch.router.release_split import ROUTE_KEY_HEADER
from conch.server import InferenceServer
from conch.shared_memory.registry import CUDA_REFUSAL, cuda_status, registry_of
from conch.shared_memory.tensors import RegionLeases

log = logging.getLogger(__name__)

T = TypeVar("T")


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Translates the Triton gRPC service into :class:`InferenceServer` calls."""

    def __init__(
        self, server: InferenceServer, stream_admission: Callable[[Any, Any], None] | None = None
    ) -> None:
        self.server = server
        #: Admits each message of a stream (:func:`.call_admission.stream_admission`), or None.
        self.stream_admission = stream_admission
        #: The system shared-memory regions, shared with the HTTP frontend of the same server.
        self.regions = registry_of(server)
        #: ``--log-inferences`` and the audit sample; None when both are off.
        self.inference_log: InferenceLog | None = None

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.server.live())

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.server.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        ready = await _awaited(context, self.server.model_ready(request.name, request.version))
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.server.metadata())

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        metadata = await _call(context, lambda: self.server.model_metadata(request.name, request.version))
        return json_format.ParseDict(metadata, pb.ModelMetadataResponse())

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        served = await _call(context, lambda: self.server.model_version(request.name, request.version))
        return pb.ModelConfigResponse(config=served.config)

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        try:
            stats = await self.server.statistics(request.name, request.version)
        except ConchError as exc:
            await _abort(context, exc)
            raise
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        entries = self.server.repository_index(request.ready, folders=True)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**e) for e in entries]
        )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        await _awaited(context, self.server.load_model(request.model_name, _parameters(request.parameters)))
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        await _awaited(context, self.server.unload_model(request.model_name, _parameters(request.parameters)))
        return pb.RepositoryModelUnloadResponse()

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        regions = await _call(context, lambda: self.regions.status(request.name))
        answer = pb.SystemSharedMemoryStatusResponse()
        for region in regions:
            answer.regions[region["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return answer

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await _call(
            context,
            lambda: self.regions.register(request.name, request.key, request.offset, request.byte_size),
        )
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.regions.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        await _call(context, lambda: cuda_status(request.name))  # no region: an empty answer
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await _abort(context, InvalidArgumentError(CUDA_REFUSAL))

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        # Nothing can be registered, so nothing is left registered: clients that unregister every
        # region at start or exit (perf_analyzer) go on.
        return pb.CudaSharedMemoryUnregisterResponse()

    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Any) -> pb.TraceSettingResponse:
        """Triton's trace extension: the settings, after the request's changes (an empty value clears
        one); the server's, or with ``model_name`` that model's."""
        changes = {name: list(value.value) or None for name, value in request.settings.items()}
        settings = await _call(
            context, lambda: self.server.trace_settings(request.model_name, changes or None)
        )
        answer = pb.TraceSettingResponse()
        for name, value in settings.items():
            answer.settings[name].value.extend(value if isinstance(value, list) else [value])
        return answer

    async def LogSettings(self, request: pb.LogSettingsRequest, context: Any) -> pb.LogSettingsResponse:
        """The log settings, as ``/v2/logging`` answers them (a change is refused with its reason)."""
        settings = await _call(context, lambda: log_settings.answer("POST", _parameters(request.settings)))
        answer = pb.LogSettingsResponse()
        for name, value in settings.items():
            kind = "bool" if isinstance(value, bool) else "uint32" if isinstance(value, int) else "string"
            setattr(answer.settings[name], f"{kind}_param", value)
        return answer

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> bytes:
        """The answer comes serialized (:func:`~.infer_codec.encode_response_bytes`)."""
        encode = infer_codec.encode_response_bytes
        try:
            # Reading a call's metadata costs a conversion from gRPC's core: only when a release splits.
            key = _route_key(context) if self.server.splits(request.model_name) else None
            if tracing.tracer is not None:
                return await tracing.grpc_request(
                    _metadata(context),
                    request.model_name,
                    request.model_version,
                    _code_of,
                    lambda trace: self._infer(request, encode, key, trace),
                )
            return await self._infer(request, encode, key)
        except ConchError as exc:
            await _abort(context, exc)
            raise
        except Exception:
            log.exception("inference on model '%s' failed", request.model_name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal server error")
            raise

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests on one stream run concurrently; each answer (or error) is sent when ready, and a
        decoupled model's answers as it sends them."""

        async def answer(message: pb.ModelInferRequest) -> AsyncIterator[pb.ModelStreamInferResponse]:
            try:
                if self.stream_admission is not None:
                    self.stream_admission(message, context)
                if self.server.is_decoupled(message.model_name, message.model_version):
                    async for reply in self._infer_decoupled(message):
                        yield reply
                elif tracing.tracer is not None:
                    reply = await tracing.grpc_request(
                        _metadata(context),
                        message.model_name,
                        message.model_version,
                        _code_of,
                        lambda trace: self._infer(message, infer_codec.encode_response, None, trace),
                        "ModelStreamInfer",
                    )
                    yield pb.ModelStreamInferResponse(infer_response=reply)
                else:
                    reply = await self._infer(message, infer_codec.encode_response)
                    yield pb.ModelStreamInferResponse(infer_response=reply)
            except ConchError as exc:
                note_error(exc)
                yield infer_codec.stream_error(message.id, exc.message)
            except Exception as exc:
                log.exception("stream inference failed")
                note_error(exc)
                yield infer_codec.stream_error(message.id, "internal server error")

        journal = self.inference_log
        logged = answer if journal is None else logged_stream(journal, context, answer)
        async for reply in answer_concurrently(request_iterator, logged):
            yield reply

    async def _infer_decoupled(
        self, message: pb.ModelInferRequest
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """A decoupled model's responses; with ``triton_enable_empty_final_response``, each says
        whether it is the last (``triton_final_response``), and an empty one closes the request, as
        Triton does."""
        leases = RegionLeases(self.regions)
        try:
            request = infer_codec.decode_request(message, leases)
            note_request(request)
            flag_final = bool(request.parameters.get("triton_enable_empty_final_response"))
            async for response in self.server.infer_stream(request):
                note_response(response)
                if isinstance(response, ConchError):
                    yield infer_codec.stream_error(message.id, response.message)
                    continue
                encoded = infer_codec.encode_response(response, request)
                if flag_final:
                    encoded.parameters["triton_final_response"].bool_param = False
                yield pb.ModelStreamInferResponse(infer_response=encoded)
        finally:
            leases.release()
        if flag_final:
            last = pb.ModelInferResponse(
                model_name=message.model_name, model_version=message.model_version, id=message.id
            )
            last.parameters["triton_final_response"].bool_param = True
            yield pb.ModelStreamInferResponse(infer_response=last)

    async def _infer(
        self,
        message: pb.ModelInferRequest,
        encode: Callable[[InferenceResponse, InferenceRequest], T],
        route_key: str | None = None,
        trace: RequestTrace | None = None,
    ) -> T:
        leases = RegionLeases(self.regions)
        try:
            if trace is not None:
                trace.begin("decode")
            request = infer_codec.decode_request(message, leases)
            if trace is not None:
                trace.end_stage()
                request.trace = trace
            response = await answer_request(self.server, request, leases, "ModelInfer RPC", route_key)
        finally:
            leases.release()
        if trace is not None:
            trace.begin("encode")
        return encode(response, request)


def _route_key(context: Any) -> str | None:
    """The ``conch-route-key`` metadata of a call (release routing), or None."""
    for key, value in _metadata(context):
        if key == ROUTE_KEY_HEADER:
            return str(value)
    return None


def _code_of(exc: ConchError) -> int:
    """The number of the gRPC code ``exc`` ends a call with (a span's ``rpc.grpc.status_code``)."""
    return int(status_of(exc).value[0])


def _metadata(context: Any) -> Any:
    """A call's metadata pairs (none for a context without them)."""
    metadata = getattr(context, "invocation_metadata", None)
    return (metadata() or ()) if metadata is not None else ()


def _parameters(parameters: Any) -> dict[str, Any]:
    """A repository request's parameters as plain values (``file:`` contents arrive as bytes)."""
    return {
        key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
        for key, value in parameters.items()
    }


async def _call(context: Any, produce: Callable[[], T]) -> T:
    try:
        return produce()
    except ConchError as exc:
        await _abort(context, exc)
        raise


async def _awaited(context: Any, work: Awaitable[T]) -> T:
    """``await work``; a ConchError ends the call with its status, as :func:`_call` does."""
    try:
        return await work
    except ConchError as exc:
        await _abort(context, exc)
        raise


async def _abort(context: Any, exc: ConchError) -> None:
    await abort(context, exc)
