"""A :class:`ConchError`'s gRPC status: the one place gRPC codes are chosen for conch's error kinds.

The error's ``headers`` (``retry-after``, ``ratelimit``, ``www-authenticate``) travel as trailing
metadata, so a gRPC client can read what an HTTP client reads in headers.
"""

from __future__ import annotations

from typing import Any

import grpc

from conch.core.errors import ConchError, ErrorKind

STATUS_CODES = {
    ErrorKind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    # HTTP's alone: a gRPC method takes no verb; only a call relayed from an HTTP path meets it.
    ErrorKind.METHOD_NOT_ALLOWED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
}

#: gRPC status codes by number, as they travel between conch's processes.
STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def status_of(exc: ConchError) -> grpc.StatusCode:
    return STATUS_CODES[exc.grpc_kind or exc.kind]


async def abort(context: Any, exc: ConchError) -> None:
    """End the call with ``exc``'s status, message and headers (as trailing metadata)."""
    if exc.headers:
        await context.abort(status_of(exc), exc.message, trailing_metadata=exc.headers)
    await context.abort(status_of(exc), exc.message)


def code_name(code: object) -> str:
    """``OK``, ``NOT_FOUND``...: a call's final code as ``context.code()`` gives it (None: OK)."""
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return STATUS_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN).name
    return "UNKNOWN"
