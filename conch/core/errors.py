"""Errors that carry their V2 status, so each frontend maps them to HTTP or gRPC in exactly one place.

Messages are written for the caller: they name the model and the offending input, and never contain
filesystem paths or stack traces.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable


class ErrorKind(enum.Enum):
    """The kinds of failure the V2 protocol distinguishes, with their HTTP status."""

    INVALID_ARGUMENT = 400
    UNAUTHENTICATED = 401
    PERMISSION_DENIED = 403
    NOT_FOUND = 404
    METHOD_NOT_ALLOWED = 405
    TOO_LARGE = 413
    RATE_LIMITED = 429
    INTERNAL = 500
    UNAVAILABLE = 503

    @property
    def http_status(self) -> int:
        return self.value


class ConchError(Exception):
    """Base class of every error conch reports to a client."""

    kind: ErrorKind = ErrorKind.INTERNAL
    #: The kind gRPC reports where Triton's gRPC answer differs from its HTTP one; None: ``kind``.
    grpc_kind: ErrorKind | None = None

    def __init__(self, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        #: HTTP response headers the answer needs (``WWW-Authenticate``, ``Retry-After``), lowercase names.
        self.headers = headers


class InvalidArgumentError(ConchError):
    """The request is malformed or does not match the model (HTTP 400)."""

    kind = ErrorKind.INVALID_ARGUMENT


class NotFoundError(ConchError):
    """Unknown model or version (HTTP 404)."""

    kind = ErrorKind.NOT_FOUND


class MethodNotAllowedError(ConchError):
    """An HTTP path called with a method it does not take (HTTP 405, as Triton answers), with the
    ``Allow`` header HTTP requires, listing the methods it takes."""

    kind = ErrorKind.METHOD_NOT_ALLOWED

    def __init__(self, method: str, allowed: tuple[str, ...], path: str = "this path") -> None:
        super().__init__(
            f"method {method} is not allowed on {path}; use {' or '.join(allowed)}",
            (("allow", ", ".join(allowed)),),
        )


class TooLargeError(ConchError):
    """A request larger than the server's limit for it (HTTP 413, gRPC RESOURCE_EXHAUSTED)."""

    kind = ErrorKind.TOO_LARGE


class UnauthenticatedError(ConchError):
    """No credentials, or credentials the server does not accept (HTTP 401, gRPC UNAUTHENTICATED)."""

    kind = ErrorKind.UNAUTHENTICATED


class PermissionDeniedError(ConchError):
    """Valid credentials that do not allow this call (HTTP 403, gRPC PERMISSION_DENIED)."""

    kind = ErrorKind.PERMISSION_DENIED


class RateLimitedError(ConchError):
    """The client sent more than its rate allows (HTTP 429, gRPC RESOURCE_EXHAUSTED)."""

    kind = ErrorKind.RATE_LIMITED


class UnavailableError(ConchError):
    """The model exists but cannot serve now: not loaded, failed, or overloaded (HTTP 503)."""

    kind = ErrorKind.UNAVAILABLE


class InternalError(ConchError):
    """The server failed while computing the answer (HTTP 500)."""

    kind = ErrorKind.INTERNAL


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'iris-pipeline'?"`` when ``known`` has names close to ``name``, else ``""``.

    A typo is the likeliest reason a name is unknown, and the closest names are the fix; every
    unknown-name message (model, input, output) ends with this same suffix.
    """
    close = difflib.get_close_matches(name, list(known), n=3)
    if not close:
        return ""
    return "; did you mean " + " or ".join(f"'{each}'" for each in close) + "?"
