"""A client of a server's release API (``/v2/models/{m}/release``), for ``conch release`` and scripts.

It speaks HTTP or HTTPS with the standard library's urllib, with a bearer token where the server
asks for one: the API is a handful of JSON calls, and a
command that a CI step runs should not need more than conch itself installs. Every failure becomes one
of two errors, because a person (or a CI step) acts differently on each:

- :class:`ReleaseRefused`: the server answered and said no (a 400 naming the field, a 404 for an
  unknown model); the message is the server's own ``{"error": ...}``;
- :class:`ServerUnreachable`: nothing answered; the message says where and why in a few words
  (``cannot reach http://localhost:8000: connection refused``), not a traceback.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from conch.release.state import ACTIONS

DEFAULT_URL = "http://localhost:8000"


class ReleaseRefused(Exception):
    """The server answered with an error status; ``message`` is its ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ServerUnreachable(Exception):
    """No HTTP answer came from ``url``: refused, unknown host, timed out."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


def base_url(url: str) -> str:
    """``url`` as the client uses it: ``localhost:8000`` gets ``http://``; ValueError for another scheme."""
    address = url if "://" in url else f"http://{url}"
    parsed = urllib.parse.urlsplit(address)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"'{url}' is not an http:// or https:// address, such as {DEFAULT_URL}")
    return address.rstrip("/")


class ReleaseClient:
    """The release calls of one server, at ``url`` (``http://host:port``)."""

    def __init__(
        self, url: str = DEFAULT_URL, timeout_s: float = 10.0, token: str = "", ca_cert: str = ""
    ) -> None:
        self.url = base_url(url)
        self.timeout_s = timeout_s
        #: A bearer token for a server with ``--auth jwt`` (release changes need the ``admin`` scope).
        self.token = token
        #: For ``https://``: the CA certificates (PEM) that sign the server's, when not the system's.
        self.context = ssl.create_default_context(cafile=ca_cert) if ca_cert else None

    def status(self, model: str) -> dict[str, Any]:
        """``GET /v2/models/{m}/release``: state, step, weights, the gate's checks, the history."""
        return self._call("GET", model, "")

    def start(self, model: str, spec: dict[str, Any]) -> dict[str, Any]:
        """``POST /v2/models/{m}/release`` with a spec's JSON (``conch.release.spec.spec_to_json``)."""
        return self._call("POST", model, "", json.dumps(spec).encode())

    def act(self, model: str, action: str) -> dict[str, Any]:
        """``POST /v2/models/{m}/release/{action}``, one of :data:`ACTIONS`; answers the new status."""
        if action not in ACTIONS:
            raise ValueError(f"no release action '{action}'; the actions are {', '.join(ACTIONS)}")
        return self._call("POST", model, "/" + action, b"")

    def signed(self, model: str, action: str, identity: str, version: int | None = None) -> dict[str, Any]:
        """``approve`` the current step or ``readmit`` a rejected ``version``; ``identity`` names who, for
        a server without auth (with a token, the server takes its ``sub``)."""
        body: dict[str, Any] = {} if version is None else {"version": version}
        if identity:
            body["identity"] = identity
        return self._call("POST", model, "/" + action, json.dumps(body).encode())

    def _call(self, method: str, model: str, tail: str, body: bytes | None = None) -> dict[str, Any]:
        path = f"/v2/models/{urllib.parse.quote(model, safe='')}/release{tail}"
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except urllib.error.HTTPError as exc:
            raise ReleaseRefused(exc.code, _error_message(exc)) from None
        except urllib.error.URLError as exc:
            raise ServerUnreachable(self.url, unreachable_reason(exc.reason)) from None
        except OSError as exc:  # a reset or a timeout while reading the answer
            raise ServerUnreachable(self.url, unreachable_reason(exc)) from None
        except ValueError:
            raise ServerUnreachable(self.url, f"the answer to {method} {path} is not JSON") from None


def unreachable_reason(error: object) -> str:
    """A socket error in a few words: ``connection refused``, ``timed out``, ``unknown host``."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"its certificate is not trusted ({error.verify_message}): pass the CA that signed it (--ca-cert)"
        )
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return str(error)


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The server's ``{"error": ...}``, else the status line (a proxy's HTML page, say)."""
    try:
        document = json.load(exc)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return str(document["error"])
    return f"HTTP {exc.code} {exc.reason}"
