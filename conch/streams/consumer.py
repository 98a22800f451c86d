"""The loop of one input stream: read, infer, write the result or dead letter, then acknowledge.

At least once: an entry is acknowledged only after its result or dead letter is written, so a
consumer that dies leaves its unfinished entries pending, and they run again (here after a restart,
or on another replica once they have been idle ``claim_idle_ms``). Each record runs through
:meth:`InferenceServer.infer` as its own request, so the model's dynamic batcher gathers records
as it gathers HTTP and gRPC requests.

Reading pauses while ``max_in_flight`` records are unacknowledged, while the model refuses for now
(a full queue, a model not ready: the record waits in ``window.py``'s window and runs again, never a
dead letter), and while
the results or dead-letter stream refuses writes. A broker that cannot be reached is retried with
backoff from 0.1 s to 5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from conch.core.errors import ConchError, ErrorKind, NotFoundError
from conch.server import InferenceServer
from conch.streams.broker import BrokerUnavailable, Entry, Outgoing, StreamSink, StreamSource
from conch.streams.config import StreamsConfig, StreamSpec
from conch.streams.record import (
    POISON,
    Record,
    RecordRefused,
    dead_letter_fields,
    decode_record,
    refusal_of,
    result_fields,
)
from conch.streams.state import StreamState
from conch.streams.window import ModelWindow

log = logging.getLogger(__name__)

#: Kinds of refusal that say "not now" rather than "never": the record waits and runs again.
_TRANSIENT = (ErrorKind.UNAVAILABLE, ErrorKind.RATE_LIMITED)
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
#: Milliseconds a read waits for new entries: short, so that a stop is noticed within it.
READ_BLOCK_MS = 500
#: Seconds a stopping consumer keeps trying to write and acknowledge its last answers; what is left
#: then stays pending, for a later run.
STOP_FLUSH_S = 5.0


class Backoff:
    """Doubling waits from :data:`BACKOFF_FIRST_S` to :data:`BACKOFF_MAX_S`, reset by a success."""

    def __init__(self) -> None:
        self.next_s = BACKOFF_FIRST_S

    def reset(self) -> None:
        self.next_s = BACKOFF_FIRST_S

    def take(self) -> float:
        wait, self.next_s = self.next_s, min(self.next_s * 2, BACKOFF_MAX_S)
        return wait


class StreamConsumer:
    """Reads one spec's input stream for the life of the server process."""

    def __init__(
        self,
        server: InferenceServer,
        spec: StreamSpec,
        source: StreamSource,
        sink: StreamSink,
        config: StreamsConfig,
        max_record_bytes: int,
        name: str = "",
    ) -> None:
        self.server = server
        #: This consumer's name in the group, written into each result as ``consumer``.
        self.name = name.encode()
        self.spec = spec
        self.source = source
        self.sink = sink
        self.config = config
        self.max_record_bytes = max_record_bytes
        self.state = StreamState(spec.model, spec.input, spec.group, spec.results, spec.dead_letter)
        self.stopping = asyncio.Event()
        #: Entry ids read and not yet acknowledged.
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Answers to write: the entry, the record's ingestion seconds, a dead letter's reason class.
        self._answered: list[tuple[Outgoing, float, str]] = []
        #: Written, acknowledgement not yet confirmed: entry id and reason class ("" for a result).
        self._unacknowledged: list[tuple[str, str]] = []
        self._wrote = asyncio.Event()
        self._room = asyncio.Event()
        self._waiting_on_model = 0
        self._sink_failing = False
        self._closing = False
        self._window = ModelWindow(config.max_in_flight)

    async def run(self) -> None:
        """Read and answer until :meth:`stop`; then finish what was read, acknowledge it, return."""
        writer = asyncio.create_task(self._write_forever(), name=f"conch-stream-writer-{self.spec.input}")
        figures = asyncio.create_task(self._watch_figures(), name=f"conch-stream-figures-{self.spec.input}")
        try:
            await self._read_forever()
            if self._tasks:
                await asyncio.wait(self._tasks)
            self._closing = True  # the writer returns once the last answers are written and acknowledged
            self._wrote.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(writer), STOP_FLUSH_S)
        finally:
            for task in (writer, figures, *self._tasks):
                task.cancel()
            await asyncio.gather(writer, figures, *self._tasks, return_exceptions=True)

    def stop(self) -> None:
        """Stop reading; records already read are finished and acknowledged by :meth:`run`."""
        self.stopping.set()
        self._room.set()

    def broker_unreachable(self) -> str:
        """Why the server is not ready because of this stream, or "" (the readiness condition)."""
        return "" if self.state.broker_up else f"stream '{self.spec.input}': its broker is unreachable"

    async def _read_forever(self) -> None:
        backoff = Backoff()
        opened, own_after = False, "0"
        last_claim = 0.0
        claim_every_s = max(0.5, self.config.claim_idle_ms / 4000)
        while not self.stopping.is_set():
            if not await self._wait_for_room():
                break
            free = self.config.max_in_flight - len(self._in_flight)
            count = min(self.config.read_count, free)
            try:
                if not opened:
                    await self.source.open()
                    opened = True
                if own_after:
                    entries = await self.source.read_own_pending(count, own_after)
                    own_after = entries[-1].id if entries else ""
                elif time.monotonic() - last_claim >= claim_every_s:
                    last_claim = time.monotonic()
                    entries = await self.source.claim_stale(count, self.config.claim_idle_ms)
                else:
                    entries = await self.source.read_new(count, READ_BLOCK_MS)
            except BrokerUnavailable as exc:
                await self._broker_down(exc, backoff)
                continue
            self._broker_back(backoff)
            for entry in entries:
                if entry.id in self._in_flight:
                    continue  # claimed back while still running here
                self._in_flight.add(entry.id)
                task = asyncio.create_task(self._answer(entry))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _wait_for_room(self) -> bool:
        """Until reading may go on (False: stopping): in-flight below the cap, model and sink willing."""
        while not self.stopping.is_set():
            busy = len(self._in_flight) >= self.config.max_in_flight
            if not busy and not self._waiting_on_model and not self._sink_failing:
                self.state.paused = ""
                return True
            if self._sink_failing:
                self.state.paused = "results or dead-letter stream refuses writes"
            elif self._waiting_on_model:
                self.state.paused = f"model '{self.spec.model}' refuses for now (queue full or not ready)"
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), 0.5)
        return False

    async def _answer(self, entry: Entry) -> None:
        """Run one entry and queue its result or dead letter; a transient refusal waits and retries."""
        outgoing, ingested_s, kind = await self._outcome(entry)
        if outgoing is None:  # stopping while the model still refused: left pending for a later run
            self._release(entry.id)
            return
        self._answered.append((outgoing, ingested_s, kind))
        self._wrote.set()

    async def _outcome(self, entry: Entry) -> tuple[Outgoing | None, float, str]:
        if entry.deliveries > self.config.max_deliveries:
            refused = RecordRefused(
                POISON,
                f"delivered {entry.deliveries} times without an answer (max_deliveries "
                f"{self.config.max_deliveries}): the record may crash or hang the model",
            )
            return self._dead_letter(entry, refused)
        backoff = Backoff()
        waiting = False
        try:
            while True:
                await self._window.enter()
                refused_for_now = False
                try:
                    record = self._decode(entry)
                    response = await self.server.infer(record.request, admitted=True, endpoint="a stream")
                    fields = result_fields(record, response, time.time())
                    fields[b"consumer"] = self.name
                    return Outgoing(entry.id, fields, dead_letter=False), record.ingested_s, ""
                except RecordRefused as refused:
                    return self._dead_letter(entry, refused)
                except ConchError as exc:
                    if exc.kind not in _TRANSIENT:
                        return self._dead_letter(entry, refusal_of(exc))
                    refused_for_now = True
                finally:
                    self._window.leave(refused_for_now)
                if self.stopping.is_set():
                    return None, 0.0, ""
                if not waiting:
                    waiting = True
                    self._waiting_on_model += 1
                if self._window.inside == 0:  # refused with none of ours inside: not ready, or others' load
                    await asyncio.sleep(backoff.take())
        finally:
            if waiting:
                self._waiting_on_model -= 1
                self._room.set()

    def _decode(self, entry: Entry) -> Record:
        try:
            served = self.server.model_version(self.spec.model)
        except NotFoundError as exc:
            raise refusal_of(exc) from None
        return decode_record(entry.id, entry.fields, self.spec.model, served.config, self.max_record_bytes)

    def _dead_letter(self, entry: Entry, refused: RecordRefused) -> tuple[Outgoing, float, str]:
        log.info(
            "stream '%s': entry %s to dead letters (%s): %s",
            self.spec.input,
            entry.id,
            refused.kind,
            refused.reason[:300],
        )
        fields = dead_letter_fields(entry.id, entry.fields, refused, self.spec.model)
        return Outgoing(entry.id, fields, dead_letter=True), 0.0, refused.kind

    async def _write_forever(self) -> None:
        """The one task that writes and acknowledges, so no answer is ever written twice from here."""
        backoff = Backoff()
        while True:
            await self._wrote.wait()
            self._wrote.clear()
            while self._answered or self._unacknowledged:
                if not await self._write_once():
                    await asyncio.sleep(backoff.take())
                    continue
                backoff.reset()
            if self._closing:
                return

    async def _write_once(self) -> bool:
        """Write what is answered, then acknowledge what was written; False: retry later."""
        batch = self._answered[:]
        try:
            if batch:
                written = await self.sink.write([outgoing for outgoing, _, _ in batch])
                now = time.time()
                done = [answer for answer, ok in zip(batch, written, strict=True) if ok]
                del self._answered[: len(batch)]
                self._answered[:0] = [answer for answer, ok in zip(batch, written, strict=True) if not ok]
                for _outgoing, ingested_s, kind in done:
                    if not kind:
                        self.state.latency.observe(max(0.0, now - ingested_s))
                self._unacknowledged += [(outgoing.entry_id, kind) for outgoing, _, kind in done]
                self._sink_failing = not all(written)
            pending = self._unacknowledged[:]
            if pending:
                await self.source.acknowledge([entry_id for entry_id, _ in pending])
                del self._unacknowledged[: len(pending)]
                for entry_id, kind in pending:
                    if kind:
                        self.state.dead_letters[kind] += 1
                    self.state.answered("dead_letter" if kind else "result")
                    self._release(entry_id)
        except BrokerUnavailable as exc:
            self.state.broker_up = False
            log.warning("stream '%s': %s; retrying", self.spec.input, exc)
            return False
        return not self._sink_failing

    def _release(self, entry_id: str) -> None:
        self._in_flight.discard(entry_id)
        self._room.set()

    async def _broker_down(self, exc: BrokerUnavailable, backoff: Backoff) -> None:
        if self.state.broker_up or backoff.next_s == BACKOFF_FIRST_S:
            log.warning("stream '%s': %s; retrying with backoff", self.spec.input, exc)
        self.state.broker_up = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), backoff.take())

    def _broker_back(self, backoff: Backoff) -> None:
        if not self.state.broker_up:
            log.info("stream '%s': reading (broker %s)", self.spec.input, self.config.broker_address)
        self.state.broker_up = True
        backoff.reset()

    async def _watch_figures(self) -> None:
        """The group's lag and the records/s samples, every second."""
        while True:
            self.state.sample()
            try:
                self.state.lag = await self.source.lag()
            except BrokerUnavailable:
                self.state.broker_up = False
            await asyncio.sleep(1.0)
