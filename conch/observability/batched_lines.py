"""Writes a logger's records in batches: the lines of a few milliseconds in one write.

Why: with ``--log-inferences`` a line is written per inference, and each line the root handler
writes is a ``write`` system call on the event loop's thread, which on the development machine (2
shared cores, stderr to a file) made a record cost the server about 100 us of CPU where building
and formatting it costs about 20. A thread of its own to write them was no better: waking it is a
system call per record too. Here the record waits in a list; the first one of a batch asks the event
loop to write the batch :data:`FLUSH_SECONDS` later, through the root handlers (so with their
``--log-format`` formatter), in one write. Lines still waiting at exit are written by
``logging.shutdown``, which flushes every handler.
"""

from __future__ import annotations

import asyncio
import logging

#: How long a record may wait for the others of its batch.
FLUSH_SECONDS = 0.01


class BatchedLines(logging.Handler):
    """A handler that keeps records for :attr:`targets` (the root logger's handlers when made)."""

    def __init__(self, targets: list[logging.Handler]) -> None:
        super().__init__()
        self.targets = targets
        self._waiting: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self._waiting.append(record)
        if len(self._waiting) > 1:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a command, a test): write it now
            self.flush()
            return
        loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        records, self._waiting = self._waiting, []
        for target in self.targets:
            _write(target, records)


def _write(target: logging.Handler, records: list[logging.LogRecord]) -> None:
    """``records`` through ``target``: one write for a stream handler, else one by one."""
    if not records:
        return
    if type(target) is not logging.StreamHandler:
        for record in records:
            if record.levelno >= target.level:
                target.handle(record)
        return
    try:
        with target.lock:  # type: ignore[union-attr]
            text = "".join(target.format(record) + target.terminator for record in records)
            target.stream.write(text)
            target.stream.flush()
    except Exception:
        target.handleError(records[0])
