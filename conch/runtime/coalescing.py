"""The link's socket, with the messages of one turn of the event loop sent in one write.

Why: with 32 requests in flight, a turn of the loop answers many of them; one ``send`` per message
made the link's system calls the largest item of both processes' profiles (a frontend and the
model process each spent ~210 us of CPU a request on ``tiny``, against ~70 us for the whole of one
process). Held messages leave at the start of the next turn, before the loop waits again.
"""

from __future__ import annotations

from typing import Any

from conch.backends.python.connection import LoopConnection
from conch.backends.python.stub import conch_ipc


class CoalescingConnection(LoopConnection):
    """A :class:`LoopConnection` whose frames wait for the end of the loop's turn, then go together."""

    _flush_due = False

    def send(self, message: dict[str, Any]) -> None:
        if self._closed:
            return
        self._outbox += conch_ipc.encode_frame(message)
        if not self._flush_due:
            self._flush_due = True
            assert self.loop is not None
            self.loop.call_soon(self._flush_turn)

    def _flush_turn(self) -> None:
        self._flush_due = False
        if self._closed or not self._outbox:
            return
        try:
            sent = self.sock.send(self._outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the reader sees the death and fails what is in flight
        del self._outbox[:sent]
        if self._outbox:
            assert self.loop is not None
            self.loop.add_writer(self.sock.fileno(), self._flush)
