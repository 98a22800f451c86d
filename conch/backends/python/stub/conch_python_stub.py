"""The program a Python model's process runs: it loads ``model.py`` and answers the server.

The server starts one per model instance (``python conch_python_stub.py --fd N ...``) with the
environment's interpreter (the server's own, or ``EXECUTION_ENV_PATH``'s), so this folder is the
first entry of ``sys.path`` and ``import triton_python_backend_utils`` finds conch's implementation.

Two threads: the reader takes every message from the server and hands work (auto-complete,
initialize, execute, finalize) to the main thread, which runs the model; BLS answers, cancellations
and segment releases are handled by the reader at once, so a model waiting on BLS never blocks them.
``async def`` executes and ``async_exec`` run on an event loop of their own thread, as in Triton.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import queue
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import conch_frames
import conch_ipc
import numpy as np
import ort_threads
import pb_responses
import triton_python_backend_utils as pb_utils
from output_check import OutputRules

# Paths in an exception's message stay in the model's process; the client gets "<path>". The
# protocol's own routes (/v2/models/...) are addresses, not paths, and stay.
_PATH = re.compile(r"(?<![\w/\\.~-])(?:[A-Za-z]:(?:\\[\w.\-~]+)+|(?!/v2/)(?:/[\w.\-~]+){2,})")


def scrub(text: str) -> str:
    return _PATH.sub("<path>", text)


def describe(exc: BaseException) -> str:
    return scrub(f"{type(exc).__name__}: {exc}")


class Runtime:
    """What ``pb_utils`` talks to: the channel to the server and the segments of both sides."""

    def __init__(self, channel: conch_frames.Channel, pool: conch_ipc.SegmentPool, model_dir: Path) -> None:
        self.channel = channel
        self.pool = pool
        self.segments = conch_ipc.SegmentReader()
        self.model_dir = model_dir
        self._bls: dict[int, pb_utils.BlsCall] = {}
        self._bls_ids = itertools.count(1)
        self._cancelled: set[int] = set()
        self._senders: set[int] = set()
        self.lock = threading.Lock()
        #: What the model's outputs must be (set by ``initialize``, from the completed config).
        self.outputs: OutputRules | None = None

    # Called from pb_utils ----------------------------------------------------------------------

    def bls(
        self, request: pb_utils.InferenceRequest, decoupled: bool, call: pb_utils.BlsCall | None = None
    ) -> pb_utils.BlsCall:
        call = call or pb_utils.BlsCall(decoupled)
        tensors = [(t.name(), pb_responses.array_of(t)) for t in request.inputs()]
        segment, refs = self.pool.write(tensors)
        with self.lock:
            bls_id = next(self._bls_ids)
            self._bls[bls_id] = call
        self.channel.send(
            {
                "op": "bls",
                "bls": bls_id,
                "segment": segment,
                "model_name": request.model_name,
                "model_version": request.model_version,
                "inputs": refs,
                "outputs": request.requested_output_names(),
                "parameters": request.parameters(),
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout_us": request.timeout(),
                "decoupled": decoupled,
            }
        )
        return call

    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        message: dict[str, Any] = {"op": "response", "request": key, "flags": flags}
        message.update(self.encode_responses([response]))
        self.channel.send(message)

    def sender_used(self, key: int) -> None:
        with self.lock:
            self._senders.add(key)

    def takes_sender(self, key: int) -> bool:
        with self.lock:
            return key in self._senders

    def is_cancelled(self, key: int) -> bool:
        return key in self._cancelled

    def metric(self, *change: Any) -> None:
        """A custom metric's change (``pb_utils.Metric``), for the server's ``/metrics`` page."""
        self.channel.send({"op": "metric", "change": change})

    def log(self, message: str, level: int) -> None:
        self.channel.send({"op": "log", "level": level, "message": message})

    # Called by the reader ----------------------------------------------------------------------

    def deliver(self, message: dict[str, Any]) -> None:
        """A BLS answer: one response, or (decoupled) one of several, the last marked ``final``."""
        final = message.get("final", True)
        with self.lock:
            call = self._bls.pop(message["bls"], None) if final else self._bls.get(message["bls"])
        entry = message.get("response")
        response = self.decode_response(entry) if entry is not None else None
        if message.get("segment"):
            self.channel.send({"op": "release", "segment": message["segment"]})
        if call is None:
            return
        if response is not None:
            call.put(response)
        if final and call.decoupled:
            call.put(None)

    def cancel(self, key: int) -> None:
        self._cancelled.add(key)

    # Encoding ----------------------------------------------------------------------------------

    def encode_responses(
        self, responses: list[pb_utils.InferenceResponse | None], batches: list[int | None] | None = None
    ) -> dict[str, Any]:
        """One segment for every output of ``responses`` (see :func:`pb_responses.encode`)."""
        return pb_responses.encode(self.pool, responses, self.outputs, batches, self.log)

    def decode_response(self, entry: dict[str, Any]) -> pb_utils.InferenceResponse:
        return pb_responses.decode(self.segments, entry)


class Stub:
    """The model, and the work the server asks of it."""

    def __init__(self, runtime: Runtime, model_file: Path) -> None:
        self.runtime = runtime
        self.model_file = model_file
        self.decoupled = False  # from the completed config, in the initialize message
        self.work: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.model_class: Any = None
        self.model: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def load_module(self) -> None:
        sys.path.insert(0, str(self.model_file.parent))
        spec = importlib.util.spec_from_file_location("model", self.model_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
        if not hasattr(module, "TritonPythonModel"):
            raise AttributeError(f"{self.model_file.name} defines no class TritonPythonModel")
        self.model_class = module.TritonPythonModel

    def read_forever(self) -> None:
        """The reader thread: replies and releases at once, the rest to the main thread."""
        channel = self.runtime.channel
        while True:
            try:
                message = channel.receive()
            except OSError:
                message = None
            if message is None:
                os._exit(0)  # the server is gone
            op = message["op"]
            if op == "release":
                self.runtime.pool.release(message["segment"])
            elif op == "bls_response":
                self.runtime.deliver(message)
            elif op == "forget":
                self.runtime.segments.forget(message["segment"])
            elif op == "cancel":
                self.runtime.cancel(message["request"])
            elif op == "is_ready":
                threading.Thread(target=self.answer_readiness, daemon=True, name="conch-is-ready").start()
            else:
                self.work.put(message)

    def serve(self) -> None:
        handlers = {
            "auto_complete": self.auto_complete,
            "initialize": self.initialize,
            "execute": self.execute,
            "finalize": self.finalize,
        }
        while True:
            message = self.work.get()
            assert message is not None
            handlers[message["op"]](message)
            if message["op"] == "finalize":
                return

    def auto_complete(self, message: dict[str, Any]) -> None:
        config = pb_utils.ModelConfig(message["config"])
        try:
            completer = getattr(self.model_class, "auto_complete_config", None)
            if completer is not None:
                config = completer(config)
                if not isinstance(config, pb_utils.ModelConfig):
                    raise TypeError("auto_complete_config must return its pb_utils.ModelConfig argument")
            self.runtime.channel.send({"op": "config", "config": config.as_dict()})
        except Exception as exc:
            self.runtime.channel.send({"op": "failed", "message": describe(exc)})

    def initialize(self, message: dict[str, Any]) -> None:
        self.decoupled = bool(message.get("decoupled"))
        try:
            self.runtime.outputs = OutputRules(json.loads(message["args"]["model_config"]))
            self.model = self.model_class()
            if hasattr(self.model, "initialize"):
                result = self.model.initialize(message["args"])
                if inspect.iscoroutine(result):
                    self.run_coroutine(result)
            self.runtime.channel.send(
                {"op": "ready", "is_ready": callable(getattr(self.model, "is_ready", None))}
            )
        except Exception as exc:
            self.runtime.channel.send({"op": "failed", "message": describe(exc)})

    def execute(self, message: dict[str, Any]) -> None:
        """Run one batch. Inputs are views on the server's segment, with no copy; a segment the
        model still views when ``execute`` returns (it kept an input, or a view of one) is ``kept``:
        the server hands it over and writes the next batch elsewhere, so kept inputs never change.
        Every view holds a reference to the segment's mapping, so one reference count decides, at
        no cost for a model that keeps nothing. A decoupled model's inputs are copied at once."""
        name = message.get("segment")
        mapping = self.runtime.segments.mapping(name) if name and not self.decoupled else None
        before = sys.getrefcount(mapping)
        reply = self.run_execute(message)
        if mapping is not None:
            reply["kept" if sys.getrefcount(mapping) > before else "release"] = name
            if "kept" in reply:
                self.runtime.segments.forget(name)
        del mapping
        self.runtime.channel.send(reply)

    def run_execute(self, message: dict[str, Any]) -> dict[str, Any]:
        """The reply to one ``execute`` message; every array of the batch is gone when it returns,
        but those the model kept."""
        started = time.perf_counter_ns()
        segments = self.runtime.segments
        batch_of = self.runtime.outputs.batch_of if self.runtime.outputs else lambda inputs: None
        keep = self.decoupled  # a decoupled model may read its inputs after execute returns
        requests = []
        for entry in message["requests"]:
            inputs = [
                pb_utils.Tensor(ref.name, segments.copy(ref) if keep else segments.view(ref))
                for ref in map(conch_ipc.as_ref, entry["inputs"])
            ]
            request = pb_utils.InferenceRequest(
                request_id=entry["request_id"],
                correlation_id=entry["correlation_id"],
                inputs=inputs,
                requested_output_names=entry["outputs"],
                model_name=entry["model_name"],
                model_version=entry["model_version"],
                flags=entry["flags"],
                parameters=entry["parameters"],
            )
            request._key = entry["key"]
            request._batch = batch_of(entry["inputs"])
            requests.append(request)
        if keep and message.get("segment"):
            self.runtime.channel.send({"op": "release", "segment": message["segment"]})
        ran = time.perf_counter_ns()
        reply: dict[str, Any] = {"op": "result", "call": message["call"]}
        try:
            returned = self.model.execute(requests)
            if inspect.iscoroutine(returned):
                returned = self.run_coroutine(returned)
            done = time.perf_counter_ns()
            reply.update(self.check_returned(returned, requests))
        except Exception as exc:
            done = time.perf_counter_ns()
            reply["error"] = describe(exc)
        reply["timing"] = (ran - started, done - ran, time.perf_counter_ns() - done)
        return reply

    def check_returned(self, returned: Any, requests: list[pb_utils.InferenceRequest]) -> dict[str, Any]:
        if self.decoupled:
            if returned is not None:
                raise TypeError(
                    "a decoupled model's execute must return None and answer through response senders"
                )
            return {"responses": [None] * len(requests)}
        if returned is None:
            if all(self.runtime.takes_sender(r._key) for r in requests):
                return {"responses": [None] * len(requests)}
            raise TypeError("execute returned None: return a list with one InferenceResponse per request")
        if not isinstance(returned, (list, tuple)):
            raise TypeError(f"execute returned {type(returned).__name__}: return a list of InferenceResponse")
        if len(returned) != len(requests):
            raise ValueError(
                f"execute got {len(requests)} request(s) and returned {len(returned)} response(s); "
                "return one InferenceResponse per request"
            )
        return self.runtime.encode_responses(list(returned), [r._batch for r in requests])

    def answer_readiness(self) -> None:
        """The model's ``is_ready()`` (sync, or async on the model's loop), beside ``execute``; the
        server asks again only once this answered, so one such thread runs at a time."""
        answer: dict[str, Any] = {"op": "readiness", "ready": False}
        try:
            ready = self.model.is_ready()
            if inspect.iscoroutine(ready):
                ready = self.run_coroutine(ready)
            if isinstance(ready, (bool, np.bool_)):
                answer["ready"] = bool(ready)
            else:
                answer["error"] = f"its is_ready() returned {type(ready).__name__}; return True or False"
        except Exception as exc:
            answer["error"] = f"its is_ready() raised {describe(exc)}"
        self.runtime.channel.send(answer)

    def finalize(self, message: dict[str, Any]) -> None:
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                result = self.model.finalize()
                if inspect.iscoroutine(result):
                    self.run_coroutine(result)
        except Exception as exc:
            self.runtime.log(f"finalize failed: {describe(exc)}", pb_utils.LogLevel.ERROR)
        self.runtime.channel.send({"op": "finalized"})

    def run_coroutine(self, coroutine: Any) -> Any:
        with self.runtime.lock:  # execute and is_ready may both start it
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, daemon=True, name="conch-model-loop").start()
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--model-file", type=Path, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--shm-default-bytes", type=int, default=conch_ipc.DEFAULT_SEGMENT_BYTES)
    parser.add_argument("--shm-growth-bytes", type=int, default=conch_ipc.GROWTH_BYTES)
    args = parser.parse_args()
    channel = conch_frames.Channel(socket.socket(fileno=args.fd))
    pool = conch_ipc.SegmentPool(f"{args.prefix}-c", args.shm_default_bytes, args.shm_growth_bytes)
    runtime = Runtime(channel, pool, args.model_file.parent)
    pool.on_drop = lambda name: channel.send({"op": "forget", "segment": name})
    pb_utils._runtime = runtime
    stub = Stub(runtime, args.model_file)
    ort_threads.install()  # before the model's code runs: its sessions' idle threads sleep
    try:
        stub.load_module()
    except BaseException as exc:  # a model.py that does not import is the model's failure, not ours
        channel.send({"op": "failed", "message": describe(exc)})
        return
    channel.send({"op": "loaded"})
    threading.Thread(target=stub.read_forever, daemon=True, name="conch-reader").start()
    try:
        stub.serve()
    finally:
        pool.close()


if __name__ == "__main__":
    main()
