"""The parameters the protocol reserves, and the refusal of those a request may not use here.

KServe V2 and Triton give some parameter names a meaning (``binary_data_size`` on an HTTP input,
``classification`` on an output, the ``shared_memory_*`` trio, request keys starting ``triton_``).
A request that uses one where it has no meaning, or one this server does not implement, is refused
with a 400 saying what to do instead: a silently ignored parameter would be answered with other data
than the client asked for. Any other parameter is the client's own and passes through to the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conch.core.errors import InvalidArgumentError

SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY = (SHARED_MEMORY_REGION, SHARED_MEMORY_OFFSET, SHARED_MEMORY_BYTE_SIZE)
CLASSIFICATION = "classification"
BINARY_DATA = "binary_data"
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA_OUTPUT = "binary_data_output"

#: Request keys starting ``triton_`` that Triton accepts; every other one it refuses, and so does conch.
TRITON_REQUEST_KEYS = ("triton_enable_empty_final_response",)


def check_request_parameters(parameters: Mapping[str, Any], protocol: str) -> None:
    """Refuse Triton's reserved request keys this request may not carry (``protocol``: HTTP or gRPC)."""
    for key in parameters:
        if key.startswith("triton_") and key not in TRITON_REQUEST_KEYS:
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage; of those only "
                f"{', '.join(TRITON_REQUEST_KEYS)} is allowed, got '{key}'. Rename the parameter"
            )
    if protocol == "gRPC" and BINARY_DATA_OUTPUT in parameters:
        raise InvalidArgumentError(
            f"'{BINARY_DATA_OUTPUT}' is a parameter of the HTTP binary extension; gRPC outputs are always "
            "raw bytes: remove it"
        )


def refuse_http_only(tensor: str, parameters: Mapping[str, Any]) -> None:
    """Over gRPC: the HTTP binary extension's tensor parameters have no meaning, so they are refused."""
    for key in (BINARY_DATA, BINARY_DATA_SIZE):
        if key in parameters:
            raise InvalidArgumentError(
                f"'{key}' of tensor '{tensor}' is a parameter of the HTTP binary extension; over gRPC, "
                "tensor data is always raw bytes (raw_input_contents, raw_output_contents): remove it"
            )


def refuse_output_misuse(output: str, parameters: Mapping[str, Any]) -> None:
    """An output may not carry an input's parameter, nor shared memory and classification together."""
    if BINARY_DATA_SIZE in parameters:
        raise InvalidArgumentError(
            f"'{BINARY_DATA_SIZE}' is a parameter of inputs, not of requested output '{output}'; ask "
            f"for binary output data with '{BINARY_DATA}': true"
        )
    if SHARED_MEMORY_REGION in parameters and CLASSIFICATION in parameters:
        raise InvalidArgumentError(
            f"Output can't set both '{SHARED_MEMORY_REGION}' and '{CLASSIFICATION}' (output '{output}'): "
            "classes are answered in the response; drop one of the two"
        )
    if SHARED_MEMORY_REGION in parameters and parameters.get(BINARY_DATA) is True:
        raise InvalidArgumentError(
            f"Output can't set both '{SHARED_MEMORY_REGION}' and '{BINARY_DATA}' (output '{output}'): "
            "the data goes to the region; drop binary_data"
        )
