"""Starting and stopping one Python model process, and the blocking talk of its start-up.

A model process is a fresh interpreter (never a fork of the server, whose gRPC and ONNX Runtime
threads do not survive a fork) running ``stub/conch_python_stub.py``. It gets one end of a socket
pair as its only link to the server. Start-up (import ``model.py``, auto-complete, ``initialize``)
happens on the loader's thread with blocking calls; serving then moves the socket to the event loop
(:mod:`conch.backends.python.instance`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.backends.python.stub import conch_frames, conch_ipc
from conch.core.errors import UnavailableError

STUB = Path(__file__).parent / "stub" / "conch_python_stub.py"
#: How long a process may take to import model.py, auto-complete, or initialize.
STARTUP_TIMEOUT_S = 120.0
#: How long ``finalize`` may take when a model is unloaded before the process is killed.
FINALIZE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ProcessSettings:
    """How to start a model's processes: interpreter, environment, shared memory sizes."""

    python: str = sys.executable
    environment: dict[str, str] | None = None
    shm_default_bytes: int = conch_ipc.DEFAULT_SEGMENT_BYTES
    shm_growth_bytes: int = conch_ipc.GROWTH_BYTES


class ModelProcess:
    """One running model process and the server's end of its socket."""

    def __init__(self, model_file: Path, prefix: str, settings: ProcessSettings, label: str) -> None:
        self.label = label
        self.prefix = prefix
        ours, theirs = socket.socketpair()
        command = [
            settings.python,
            str(STUB),
            "--fd",
            str(theirs.fileno()),
            "--model-file",
            str(model_file),
            "--prefix",
            prefix,
            "--shm-default-bytes",
            str(settings.shm_default_bytes),
            "--shm-growth-bytes",
            str(settings.shm_growth_bytes),
        ]
        env = dict(settings.environment if settings.environment is not None else os.environ)
        env.pop("PYTHONPATH", None)  # the stub's folder is on sys.path; the server's packages are not
        try:
            self.popen = subprocess.Popen(
                command, pass_fds=(theirs.fileno(),), env=env, cwd=model_file.parent, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            ours.close()
            raise UnavailableError(f"{label}: cannot start its Python process ({exc.strerror})") from None
        finally:
            theirs.close()
        self.sock = ours
        self.channel = conch_frames.Channel(ours)
        #: Where the model's log lines and metric changes go while it starts (the instance sets it).
        self.on_message: Callable[[dict[str, Any]], None] = lambda message: None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def ask(self, message: dict[str, Any] | None, timeout: float = STARTUP_TIMEOUT_S) -> dict[str, Any]:
        """Send ``message`` (None: only listen) and wait for the reply; log lines and metric changes
        meanwhile go to ``on_message``."""
        self.sock.settimeout(timeout)
        try:
            if message is not None:
                self.channel.send(message)
            while True:
                reply = self.channel.receive()
                if reply is None:
                    raise UnavailableError(f"{self.label}: its Python process {self.exit_description()}")
                if reply["op"] in ("log", "metric", "forget"):
                    self.on_message(reply)
                    continue
                if reply["op"] == "release":
                    continue
                return reply
        except TimeoutError:
            self.kill()
            raise UnavailableError(
                f"{self.label}: its Python process did not answer within {timeout:.0f} s"
            ) from None
        finally:
            self.sock.settimeout(None)

    def exit_description(self) -> str:
        """How the process ended, for messages: ``exited with code 3``, ``was killed by SIGKILL``."""
        try:
            code = self.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "closed its connection"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        return f"exited with code {code}"

    def finalize(self) -> None:
        """Ask the model to finalize, then end the process (killed if it takes too long)."""
        try:
            self.sock.setblocking(True)
            self.ask({"op": "finalize"}, timeout=FINALIZE_TIMEOUT_S)
        except (UnavailableError, OSError):
            pass
        self.kill()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        self.sock.close()
        conch_ipc.remove_segments(self.prefix)
