"""BatchedLines: the records' lines written in batches, through the target's own formatter."""

from __future__ import annotations

import asyncio
import io
import logging

from conch.observability.batched_lines import FLUSH_SECONDS, BatchedLines


class CountingStream(io.StringIO):
    """A stream that counts its writes (each is one system call on a real file)."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_records_on_an_event_loop_are_written_in_one_write_through_the_targets_formatter() -> None:
    stream = CountingStream()
    target = logging.StreamHandler(stream)
    target.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    kept: list[str] = []
    other = logging.Handler()
    other.emit = lambda record: kept.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.Logger("tests.batched_lines", logging.INFO)
    logger.addHandler(BatchedLines([target, other]))

    async def log_and_wait() -> str:
        for number in range(200):
            logger.info("line %d", number)
        waiting = stream.getvalue()
        await asyncio.sleep(FLUSH_SECONDS * 5)
        return waiting

    assert asyncio.run(log_and_wait()) == ""
    assert stream.getvalue().splitlines() == [f"INFO line {n}" for n in range(200)]
    assert stream.writes == 1
    assert kept == [f"line {n}" for n in range(200)]


def test_without_an_event_loop_a_record_is_written_at_once_and_flush_writes_what_waits() -> None:
    stream = CountingStream()
    lines = BatchedLines([logging.StreamHandler(stream)])
    logger = logging.Logger("tests.batched_lines.now", logging.INFO)
    logger.addHandler(lines)

    logger.info("at once")

    assert stream.getvalue() == "at once\n"
    lines.flush()
    assert stream.writes == 1
