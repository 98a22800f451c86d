"""A Python model's own word on its readiness: Triton's ``is_ready()`` hook, asked of its process.

A model may define ``def is_ready(self)`` or ``async def is_ready(self)`` returning True or False.
Its process runs it on a thread of its own (an ``async`` one on the model's event loop), so it answers
while ``execute`` runs: keep it light and safe to call beside ``execute``. As in Triton, an answer
that is not a bool, an exception, or no answer within :data:`TIMEOUT_S` means not ready.

At most one call is in flight per process: a caller arriving while one runs (even one that timed
out) waits for the same answer, so a stuck ``is_ready`` is never called twice. Caching the answer
between probes is the version's business (:mod:`conch.lifecycle.builders.python_models`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

#: How long the server waits for ``is_ready`` (Triton's 5 s): longer means not ready.
TIMEOUT_S = 5.0


class ReadinessCall:
    """The one ``is_ready`` call of one process that may be in flight."""

    def __init__(self) -> None:
        self._pending: asyncio.Future[tuple[bool, str]] | None = None

    async def ask(
        self, send: Callable[[dict[str, Any]], None], timeout_s: float = TIMEOUT_S
    ) -> tuple[bool, str]:
        """(ready, why not) from the model's ``is_ready``; a call already in flight is joined."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.get_running_loop().create_future()
            send({"op": "is_ready"})
        try:
            return await asyncio.wait_for(asyncio.shield(self._pending), timeout_s)
        except TimeoutError:
            return False, f"its is_ready() did not answer within {timeout_s:g} s"

    def answered(self, message: dict[str, Any]) -> None:
        """The process's ``readiness`` message."""
        error = str(message.get("error") or "")
        self._settle(bool(message.get("ready")) and not error, error)

    def fail(self, why: str) -> None:
        """The process died or stopped: the call in flight gets no answer but this one."""
        self._settle(False, why)

    def _settle(self, ready: bool, why: str) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.set_result((ready, why))
