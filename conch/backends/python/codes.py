"""Triton's error codes (``pb_utils.TritonError``) and conch's error kinds, both ways.

A model's per-request ``TritonError`` becomes the request's error with the status its code means;
an error a BLS call meets in the server goes back to the model with the code of its kind.
"""

from __future__ import annotations

from conch.core.errors import (
    ConchError,
    ErrorKind,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)

UNKNOWN = 0
INTERNAL = 1
NOT_FOUND = 2
INVALID_ARG = 3
UNAVAILABLE = 4

_ERROR_OF_CODE: dict[int, type[ConchError]] = {
    INVALID_ARG: InvalidArgumentError,
    NOT_FOUND: NotFoundError,
    UNAVAILABLE: UnavailableError,
}
_CODE_OF_KIND = {
    ErrorKind.INVALID_ARGUMENT: INVALID_ARG,
    ErrorKind.NOT_FOUND: NOT_FOUND,
    ErrorKind.UNAVAILABLE: UNAVAILABLE,
    ErrorKind.RATE_LIMITED: UNAVAILABLE,
}


def error_of_code(message: str, code: int) -> ConchError:
    """INVALID_ARG is a 400, NOT_FOUND a 404, UNAVAILABLE a 503, any other code a 500."""
    return _ERROR_OF_CODE.get(code, InternalError)(message)


def code_of_error(error: ConchError) -> int:
    return _CODE_OF_KIND.get(error.kind, INTERNAL)
