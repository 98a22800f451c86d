"""One Python model instance as the server sees it: its process, the requests it runs, its restarts.

``execute`` writes a batch's inputs into a shared memory segment, sends one small message, and
awaits the reply on the event loop: the socket is watched by the loop itself (``add_reader``), so
there is no thread hop on the way. The model's process calls back for BLS (another model, through
the server's normal path) and, when decoupled, sends responses whenever it likes; both arrive on the
same socket.

When the process dies, the requests it was running fail at once with a 503 that says so, and the
instance restarts itself with backoff (:mod:`conch.backends.python.restarts`); requests that come
meanwhile wait for it in the batcher's queue, or go to the model's other instances.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from conch.backends.python.bls import BlsLink, Inference, InferenceStream, answer_bls
from conch.backends.python.connection import LoopConnection
from conch.backends.python.late_responses import LateResponses, Outcome
from conch.backends.python.messages import decode_answer, decode_answers, request_entry, settle_inputs
from conch.backends.python.process import ModelProcess, ProcessSettings
from conch.backends.python.readiness import ReadinessCall
from conch.backends.python.stub import conch_ipc
from conch.core.errors import ConchError, InternalError, UnavailableError
from conch.core.types import ExecutionTiming
from conch.observability import tracing
from conch.observability.custom_metrics import CUSTOM_METRICS

log = logging.getLogger(__name__)

_LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}
_instance_ids = itertools.count(1)


@functools.cache
def _remove_segments_at_exit() -> None:
    """Once per server: at exit, remove every segment this server's instances and processes left."""
    atexit.register(conch_ipc.remove_segments, f"conch-{os.getpid()}")


@dataclass(frozen=True)
class InstanceSpec:
    """What every process of one instance is started with."""

    model_name: str
    version: int
    instance_name: str
    model_file: Path
    settings: ProcessSettings

    @property
    def label(self) -> str:
        return f"model '{self.model_name}' instance '{self.instance_name}'"


@dataclass
class _Call:
    future: asyncio.Future[dict[str, Any]]
    keys: list[int]
    #: Each request's requested outputs, to pick them from the answers.
    wanted: list[list[str]]
    #: The batch span of a traced execution: the model's BLS calls meanwhile are spans under it.
    trace: Any = None


class PythonInstance:
    """One ``instance_group`` instance of a Python model (``RequestListInstance`` for the batcher)."""

    def __init__(
        self,
        spec: InstanceSpec,
        inference: Inference | None = None,
        inference_stream: InferenceStream | None = None,
    ) -> None:
        self.spec = spec
        self.inference = inference
        self.inference_stream = inference_stream
        self.process: ModelProcess | None = None
        self.serving = False
        self.decoupled = False
        #: What ``initialize`` gets (set once the config is complete).
        self.args: dict[str, str] = {}
        #: Called when the process died (its description) and when it serves again (None).
        self.on_exit: Callable[[PythonInstance, str], None] = lambda instance, why: None
        self._uid = next(_instance_ids)
        self._generation = 0
        self._pool: conch_ipc.SegmentPool | None = None
        self._segments = conch_ipc.SegmentReader()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connection: LoopConnection | None = None
        self._calls: dict[int, _Call] = {}
        self._late = LateResponses()
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self.started_at = 0.0
        #: The model's ``is_ready()`` hook (None: its class has none).
        self.readiness: ReadinessCall | None = None

    # -- start-up (blocking, on the loader's thread) ---------------------------------------------

    def launch(self) -> None:
        """Start the process and import ``model.py``; a model that does not import fails here."""
        _remove_segments_at_exit()
        self._generation += 1
        prefix = f"conch-{os.getpid()}-{self._uid}-{self._generation}"
        self._pool = conch_ipc.SegmentPool(
            f"{prefix}-p", self.spec.settings.shm_default_bytes, self.spec.settings.shm_growth_bytes
        )
        self._segments = conch_ipc.SegmentReader()
        self._pool.on_drop = lambda name: self._send({"op": "forget", "segment": name})
        process = ModelProcess(self.spec.model_file, prefix, self.spec.settings, self.spec.label)
        process.on_message = self._side_message
        self.process = process
        reply = process.ask(None)
        if reply["op"] != "loaded":
            self.stop()
            raise UnavailableError(
                f"{self.spec.label}: {self.spec.model_file.name} failed to load: {reply['message']}"
            )

    def complete_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config after the model's ``auto_complete_config`` (the same config when it has none)."""
        reply = self._running().ask({"op": "auto_complete", "config": json.dumps(config)})
        if reply["op"] != "config":
            raise UnavailableError(f"{self.spec.label}: auto_complete_config failed: {reply['message']}")
        completed: dict[str, Any] = reply["config"]
        return completed

    def initialize(self) -> None:
        """Run the model's ``initialize(args)``; its error (type and message) is the version's reason."""
        reply = self._running().ask({"op": "initialize", "args": self.args, "decoupled": self.decoupled})
        if reply["op"] != "ready":
            self.stop()
            raise UnavailableError(f"{self.spec.label}: initialize failed: {reply['message']}")
        self.serving = True
        self.readiness = ReadinessCall() if reply.get("is_ready") else None
        self.started_at = time.monotonic()

    def start(self) -> None:
        """Launch and initialize (a restart)."""
        self.launch()
        self.initialize()

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        """One blocking execution of one request, before the instance serves on the event loop: the
        config's ``model_warmup`` samples run this way, as for ONNX models."""
        process = self._running()
        assert self._pool is not None
        segment, refs = self._pool.write(list(inputs.items()))
        entry = request_entry(0, refs, output_names, "", {}, self._model)
        reply = process.ask({"op": "execute", "call": 0, "segment": segment, "requests": [entry]})
        settle_inputs(self._pool, reply)
        if reply["op"] != "result":
            raise InternalError(f"{self.spec.label} answered a warm-up request with '{reply['op']}'")
        timing.compute_input_ns, timing.compute_infer_ns, timing.compute_output_ns = reply["timing"]
        try:
            if reply.get("error"):
                raise InternalError(f"{self.spec.label} failed to execute: {reply['error']}")
            entry = reply["responses"][0]
            outcome = decode_answer(entry, output_names, self._segments, self.spec.label) if entry else {}
        finally:
            if reply.get("segment"):
                process.channel.send({"op": "release", "segment": reply["segment"]})
        if isinstance(outcome, ConchError):
            raise outcome
        return outcome

    def stop(self) -> None:
        """End the process at once, without ``finalize`` (a failed start, a dead process)."""
        self.serving = False
        process, self.process = self.process, None
        if process is not None:
            self._detach()
            process.kill()
        if self._pool is not None:
            self._pool.close()

    def close(self) -> None:
        """Unload: let the model finalize, then end its process."""
        self.serving = False
        process, self.process = self.process, None
        if process is not None:
            self._detach()
            process.finalize()
        if self._pool is not None:
            self._pool.close()

    def shutdown(self) -> None:
        """:meth:`close` without holding the caller: the socket leaves the event loop here, and the
        model's ``finalize`` runs on a thread of its own (it may take seconds)."""
        self.serving = False
        process, self.process = self.process, None
        if process is None:
            return
        self._detach()
        self._fail_in_flight(UnavailableError(f"{self.spec.label} is unloading"))
        pool = self._pool

        def finish() -> None:
            process.finalize()
            if pool is not None:
                pool.close()

        threading.Thread(target=finish, name="conch-python-finalize", daemon=True).start()

    @property
    def _model(self) -> tuple[str, int]:
        return self.spec.model_name, self.spec.version

    def _running(self) -> ModelProcess:
        if self.process is None:
            raise UnavailableError(f"{self.spec.label} has no running process")
        return self.process

    # -- serving (on the event loop) -------------------------------------------------------------

    async def execute(self, requests: list[Any]) -> tuple[list[Outcome], ExecutionTiming]:
        """Run one batch: the model's ``execute`` gets these requests as a list."""
        if not self.serving or self.process is None:
            raise UnavailableError(f"{self.spec.label} is restarting; retry the request")
        self.attach()
        assert self._pool is not None and self._loop is not None
        keys = [next(self._ids) for _ in requests]
        tensors = [(name, array) for request in requests for name, array in request.inputs.items()]
        segment, refs = self._pool.write(tensors)
        entries, first = [], 0
        for key, request in zip(keys, requests, strict=True):
            count = len(request.inputs)
            entries.append(
                request_entry(
                    key,
                    refs[first : first + count],
                    request.output_names,
                    request.id,
                    request.parameters,
                    self._model,
                )
            )
            first += count
            if request.stream is not None:
                self._late.stream_to(key, request.stream)
        call = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        traced = None if tracing.tracer is None else tracing.execution_of(requests)
        self._calls[call] = _Call(future, keys, [list(request.output_names) for request in requests], traced)
        self._send({"op": "execute", "call": call, "segment": segment, "requests": entries})
        try:
            reply = await future
        finally:
            self._calls.pop(call, None)
        settle_inputs(self._pool, reply)
        timing = ExecutionTiming(*reply["timing"])
        if reply.get("error"):
            error = InternalError(f"{self.spec.label} failed to execute: {reply['error']}")
            for key in keys:
                self._late.end(key, error)
            return [error] * len(requests), timing
        outcomes: list[Outcome] = []
        for key, answer in zip(keys, reply["answers"], strict=True):
            if answer is not None:
                self._late.returned(key)
                outcomes.append(answer)
            elif self.decoupled:
                outcomes.append({})  # the responses go to the request's stream
            else:
                outcomes.append(await self._late.sent(key))
        return outcomes, timing

    async def is_ready(self) -> tuple[bool, str]:
        """(ready, why not) from the model's ``is_ready()``; (True, "") when it has none."""
        if self.readiness is None:
            return True, ""
        if not self.serving or self.process is None:
            return False, f"instance '{self.spec.instance_name}' is restarting"
        self.attach()
        return await self.readiness.ask(self._send)

    # -- messages from the process ---------------------------------------------------------------

    def attach(self) -> None:
        """Watch the process's socket from the running event loop (idempotent): its messages, and
        its death, are noticed even while no request runs."""
        process = self.process
        if self._connection is not None or process is None:
            return
        self._connection = LoopConnection(process.sock, self._dispatch, lambda: self._died(process))
        self._connection.attach()
        self._loop = self._connection.loop

    def _detach(self) -> None:
        if self._connection is not None:
            self._connection.detach()
        self._connection = None
        self._loop = None

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "result":
            call = self._calls.get(message["call"])
            if call is not None and not call.future.done():
                if not message.get("error"):
                    # Copied out now, before the segment goes back to the model's process.
                    message["answers"] = decode_answers(message, call.wanted, self._segments, self.spec.label)
                call.future.set_result(message)
            self._release_theirs(message.get("segment"))
        elif op == "response":
            self._on_response(message)
        elif op == "release":
            if self._pool is not None:
                self._pool.release(message["segment"])
        elif op == "bls":
            assert self._pool is not None
            link = BlsLink(
                self.inference, self.inference_stream, self.spec.label, self._segments, self._pool, self._send
            )
            self._spawn(answer_bls(message, link, self._bls_parent() if tracing.tracer else None))
        elif op == "readiness":
            if self.readiness is not None:
                self.readiness.answered(message)
        elif op in ("log", "metric", "forget"):
            self._side_message(message)

    def _bls_parent(self) -> Any:
        """The batch span a BLS call comes from: the one execution in flight, if traced."""
        calls = list(self._calls.values())
        return calls[0].trace if len(calls) == 1 else None

    def _on_response(self, message: dict[str, Any]) -> None:
        entry = message["responses"][0]
        answer = None if entry is None else decode_answer(entry, None, self._segments, self.spec.label)
        self._late.arrived(message["request"], answer, final=bool(message["flags"] & 1))
        self._release_theirs(message.get("segment"))

    def _release_theirs(self, segment: str | None) -> None:
        if segment:
            self._send({"op": "release", "segment": segment})

    def _side_message(self, message: dict[str, Any]) -> None:
        """A log line, a custom metric's change or a segment the model removed, whenever it comes."""
        if message["op"] == "metric":
            CUSTOM_METRICS.change(*message["change"])
        elif message["op"] == "forget":
            self._segments.forget(message["segment"])
        else:
            self._log(message)

    def _log(self, message: dict[str, Any]) -> None:
        log.log(
            _LOG_LEVELS.get(message["level"], logging.INFO), "%s: %s", self.spec.label, message["message"]
        )

    def _send(self, message: dict[str, Any]) -> None:
        if self._connection is not None:
            self._connection.send(message)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]

    # -- death -----------------------------------------------------------------------------------

    def _died(self, process: ModelProcess) -> None:
        why = process.exit_description()
        error = UnavailableError(
            f"{self.spec.label}: its Python process {why} while running this request; conch restarts "
            "it, retry the request"
        )
        log.error("%s: its Python process (pid %d) %s", self.spec.label, process.pid, why)
        self.stop()
        self._fail_in_flight(error)
        self.on_exit(self, why)

    def _fail_in_flight(self, error: ConchError) -> None:
        for call in list(self._calls.values()):
            if not call.future.done():
                call.future.set_exception(error)
        self._calls.clear()
        self._late.fail_all(error)
        if self.readiness is not None:
            self.readiness.fail(error.message)
