"""``triton_python_backend_utils`` as conch provides it inside a Python model's process.

Triton Python-backend models import this module as ``pb_utils`` and use its classes to read requests,
build responses, call other models (BLS) and log. The API here follows Triton's python_backend: the
same names, arguments and behaviour for what conch supports; ``docs/python-backend.md`` lists what is
supported and what is not. It is conch's own implementation; tensors reach it through
:mod:`conch_ipc`'s shared memory segments.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 1

#: Set by the stub when the process starts: what BLS, response senders and the logger talk to.
_runtime: Any = None

# The rest of the API, in modules of their own, under the names models use.
from pb_bls import BlsCall, _ResponseIterator  # noqa: E402
from pb_errors import TritonError, TritonModelException  # noqa: E402
from pb_metrics import Metric, MetricFamily  # noqa: E402
from pb_model_config import ModelConfig  # noqa: E402
from pb_tensors import (  # noqa: E402
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "BlsCall",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]


# -- requests and responses -------------------------------------------------------------------------


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceResponseSender:
    """Sends a request's responses (decoupled models: 0..n, then ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``)."""

    def __init__(self, request_key: int) -> None:
        self._key = request_key
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                raise TritonModelException("send() needs a response unless the flags say it is the final one")
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
        _runtime.send_response(self._key, response, flags)

    def is_cancelled(self) -> bool:
        return _runtime.is_cancelled(self._key)


class InferenceRequest:
    """A request this model received, or one it builds to call another model (BLS)."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if inputs is None or requested_output_names is None:
            raise TritonModelException("InferenceRequest needs inputs and requested_output_names")
        self._request_id = _text(request_id)
        self._correlation_id = _text(correlation_id) if isinstance(correlation_id, bytes) else correlation_id
        self._inputs = list(inputs)
        self._outputs = [_text(name) for name in requested_output_names]
        self.model_name = _text(model_name)  # models often pass a BYTES element, as Triton accepts
        self.model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters = _parameters_json(parameters)
        self._trace = trace
        self._key: int | None = None  # set for requests the server sent to this model
        self._batch: int | None = None  # their batch size, for the output check
        self._sender: InferenceResponseSender | None = None

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON object string, as Triton gives them."""
        return self._parameters

    def trace(self) -> Any:
        return self._trace

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("conch does not support rescheduling requests")

    def is_cancelled(self) -> bool:
        return self._key is not None and _runtime.is_cancelled(self._key)

    def get_response_sender(self) -> InferenceResponseSender:
        if self._key is None:
            raise TritonModelException("only a request this model received has a response sender")
        if self._sender is None:
            self._sender = InferenceResponseSender(self._key)
            _runtime.sender_used(self._key)
        return self._sender

    def exec(self, decoupled: bool = False) -> InferenceResponse | Iterator[InferenceResponse]:
        """Run this request on ``model_name`` in the server and wait (BLS). Errors come back as the
        response's error; ``decoupled=True`` returns an iterator over a decoupled model's responses."""
        call = _runtime.bls(self, decoupled)
        if decoupled:
            return _ResponseIterator(call)
        return call.get()

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse | Iterator[InferenceResponse]:
        """:meth:`exec` without blocking the event loop of an ``async def execute``."""
        if decoupled:
            return _ResponseIterator(_runtime.bls(self, decoupled))
        # The answer lands on this loop's future (no thread waits for it), so concurrent calls cost
        # nothing while in flight.
        call = _runtime.bls(self, decoupled, BlsCall(loop=asyncio.get_running_loop()))
        return await call.future


# -- logging ----------------------------------------------------------------------------------------


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Messages for the server's log, tagged with the model's name."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        if _runtime is not None:
            _runtime.log(str(message), level)

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, LogLevel.VERBOSE)


def get_model_dir() -> str:
    """The model's version folder, where ``model.py`` lies."""
    return str(_runtime.model_dir) if _runtime is not None else ""


# -- lookups ----------------------------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((e for e in model_config.get("input", []) if e.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((e for e in model_config.get("output", []) if e.get("name") == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def _text(value: Any) -> Any:
    """A name given as bytes (an element of a BYTES tensor) as text."""
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        return bytes(value).decode("utf-8")
    return value


def _parameters_json(parameters: dict[str, Any] | str | None) -> str:
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        return parameters
    return json.dumps(parameters)
