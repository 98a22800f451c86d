"""The one supervisor of the processes ``conch serve`` starts: ``--workers`` replicas and ``--proxies``.

Rule: the processes of one server start together and stop together. Each child's exit is noticed as
it happens (a pidfd watched on the event loop, no polling) and reaped at once; one that exits while
the server is not stopping is reported through :attr:`Children.exited`, and the owner stops the
server with an error, so an orchestrator restarts the whole of it. Stopping asks every child to go
(a signal, or the owner's own word over its link), waits for them, and kills what is left after the
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

log = logging.getLogger(__name__)


class Children:
    """Child processes of this one, by pid, watched on the running event loop."""

    def __init__(self, what: str, on_exit: Callable[[int, int], None] | None = None) -> None:
        #: What the children are, for the log ("worker process", "proxy process").
        self.what = what
        #: Called with (pid, exit status) as each child exits.
        self.on_exit = on_exit
        #: Set when the first child exits.
        self.exited = asyncio.Event()
        #: Each exited child's status (``os.waitstatus_to_exitcode``: negative for a signal).
        self.codes: dict[int, int] = {}
        self._watched: dict[int, int] = {}  # pid -> pidfd
        self._all_exited = asyncio.Event()
        self._all_exited.set()

    def adopt(self, pid: int) -> None:
        """Watch ``pid``, a child of this process started by ``fork`` or ``posix_spawn``."""
        descriptor = os.pidfd_open(pid)
        self._watched[pid] = descriptor
        self._all_exited.clear()
        asyncio.get_running_loop().add_reader(descriptor, self._reap, pid)

    @property
    def running(self) -> list[int]:
        return list(self._watched)

    async def stop(self, sig: signal.Signals | None, timeout_s: float) -> None:
        """Send ``sig`` to every child still running (None: the owner has told them already), wait up to
        ``timeout_s`` for them to exit, then kill the rest and wait for those."""
        if sig is not None:
            for pid in self.running:
                _send(pid, sig)
        try:
            await asyncio.wait_for(self._all_exited.wait(), timeout_s)
        except TimeoutError:
            for pid in self.running:
                log.warning("%s %d did not stop within %g s; killing it", self.what, pid, timeout_s)
                _send(pid, signal.SIGKILL)
            await self._all_exited.wait()

    def _reap(self, pid: int) -> None:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0  # reaped elsewhere: its status is lost
        if not done:
            return
        descriptor = self._watched.pop(pid)
        asyncio.get_running_loop().remove_reader(descriptor)
        os.close(descriptor)
        code = os.waitstatus_to_exitcode(status)
        self.codes[pid] = code
        self.exited.set()
        if not self._watched:
            self._all_exited.set()
        if self.on_exit is not None:
            self.on_exit(pid, code)


def _send(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
