"""The uvicorn server each HTTP port runs on (inference and metrics alike): httptools with conch's
connection and request-head limits (``connection_limits.py``) and one write per answer
(``coalesced_writes.py``), without uvicorn's own signal handling or log configuration."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn

from conch.frontends.http.coalesced_writes import holding_heads
from conch.frontends.http.connection_limits import limited_protocol
from conch.frontends.http.limits import HttpLimits


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: ``conch.serving.serve`` stops all its servers together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_server(app: Any, limits: HttpLimits | None = None) -> uvicorn.Server:
    """A uvicorn server for ``app`` with ``limits``, started with ``serve(sockets=[...])``."""
    limits = limits or HttpLimits()
    # log_config=None: uvicorn's records go to the root handler (--log-format) instead of its own.
    config = uvicorn.Config(
        app,
        loop="none",
        http=holding_heads(limited_protocol(limits)),
        timeout_keep_alive=int(limits.idle_timeout_secs),
        lifespan="off",
        access_log=False,
        log_level="warning",
        log_config=None,
    )
    return _Uvicorn(config)
