"""The status page's routes: ``/`` and ``/ui`` (the page), ``/ui/status.css|js``, ``/ui/status.json``.

The page, its style sheet and its script are static files shipped with conch and sent as they are:
no data is written into the page, so with ``--auth jwt`` it can be served without a token, and the
browser loads nothing from anywhere else (the Content-Security-Policy says so too). Only
``status.json`` carries data, and the gateway asks it for a token with the ``infer`` scope (see
:func:`conch.gateway.api_groups.http_call`).
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

import orjson

from conch.core.errors import MethodNotAllowedError, NotFoundError
from conch.frontends.http.replies import Reply
from conch.gateway.scopes import Grant
from conch.observability import events
from conch.server import InferenceServer
from conch.status_page.sampling import current_snapshot, recent_traffic_of
from conch.status_page.summary import status_summary

PAGE_PATH = "/ui"
DATA_PATH = "/ui/status.json"
_STATIC = {
    "/ui": ("index.html", b"text/html; charset=utf-8"),
    "/ui/status.css": ("status.css", b"text/css; charset=utf-8"),
    "/ui/status.js": ("status.js", b"text/javascript; charset=utf-8"),
}
#: Same-origin script, style and fetches only; no framing, no plugins, no inline script.
_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_COMMON = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def is_status_path(path: str) -> bool:
    """Whether ``path`` is one of the page's (``/``, ``/ui`` and what is under it)."""
    return path == "/" or path == PAGE_PATH or path.startswith(PAGE_PATH + "/")


class StatusPage:
    """Serves the page and its data for one server (:mod:`.sampling` feeds its recent traffic)."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.traffic = recent_traffic_of(server)
        self._files: dict[str, bytes] = {}

    async def answer(self, method: str, path: str, grant: Grant | None) -> Reply:
        """The reply to a request for one of the page's paths (:func:`is_status_path`)."""
        if path in ("/", PAGE_PATH + "/"):
            return 302, b"", [(b"location", PAGE_PATH.encode())]
        if method != "GET":
            raise MethodNotAllowedError(method, ("GET",), path)
        if path == DATA_PATH:
            body = orjson.dumps(await self.summary(grant), option=orjson.OPT_SERIALIZE_NUMPY)
            return 200, body, [(b"content-type", b"application/json"), *_COMMON]
        found = _STATIC.get(path)
        if found is None:
            raise NotFoundError(f"no route for {path}")
        name, content_type = found
        headers = [(b"content-type", content_type), (b"content-security-policy", _POLICY), *_COMMON]
        return 200, self._file(name), headers

    async def summary(self, grant: Grant | None = None) -> dict[str, Any]:
        """The page's document, with figures up to this moment; ``grant`` filters the models."""
        figures = self.traffic.figures(time.monotonic(), await current_snapshot(self.server))
        visible = (lambda _name: True) if grant is None else grant.may_see
        return status_summary(self.server, figures, self.traffic.window_s, events.RECENT, visible)

    def _file(self, name: str) -> bytes:
        body = self._files.get(name)
        if body is None:
            body = self._files[name] = resources.files("conch.status_page").joinpath(name).read_bytes()
        return body
