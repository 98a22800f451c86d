"""The servers compared: how each is installed, given the benchmark models, and started.

- ``conch``: this checkout, ``python -m conch.cli.main serve`` from the project's interpreter;
- ``triton``: real Triton 2.51 through ``shared/tools/triton-server``, python-backend models
  (``peer_code/triton_model.py``) running the same ONNX file with ONNX Runtime;
- ``mlserver``: MLServer 1.7 from PyPI in its own venv, a custom runtime with adaptive batching;
- ``naive``: FastAPI + uvicorn, one process, the session called inside the handler.

Peer venvs live under ``~/.cache/conch-bench/<peer>`` (never in the project venv) and are built once per
package list. Installing or starting a peer may fail: :class:`PeerUnavailable` says why, and the run
records the reason in the table instead of stopping.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from bench.loadgen import SHARED_TOOLS
from bench.models import PEER_CODE, write_conch_repository, write_mlserver_repository, write_triton_repository
from bench.servers import Ports, ServerProcess

CACHE = Path(os.environ.get("CONCH_BENCH_CACHE", Path.home() / ".cache" / "conch-bench"))
TRITON_SERVER = SHARED_TOOLS / "triton-server"
TOOLS_CACHE = Path(os.environ.get("CONCH_TOOLS_CACHE", Path.home() / ".cache" / "conch-tools"))
TRITON_VENV = TOOLS_CACHE / "triton" / "venv"
# The peers run the ONNX Runtime the project pins, so the session is the same everywhere.
MLSERVER_PACKAGES = ("mlserver==1.7.*", "uvloop<0.22", f"onnxruntime=={ort.__version__}", "numpy")
NAIVE_PACKAGES = ("fastapi", "uvicorn[standard]", f"onnxruntime=={ort.__version__}", "numpy")


class PeerUnavailable(RuntimeError):
    """The peer cannot be installed or prepared on this machine; the message is the reason."""


@dataclass(frozen=True)
class Peer:
    """A server to compare: its display name, the protocols measured and how to build its process."""

    key: str
    title: str
    protocols: tuple[str, ...]
    build: Callable[[Path, Sequence[str]], ServerProcess]
    #: The interpreter whose packages the peer runs on, for the versions in the report.
    python: Callable[[], Path]
    packages: tuple[str, ...]


def conch_server(workdir: Path, models: Sequence[str], workers: int = 1) -> ServerProcess:
    """``conch serve`` on the conch repository of ``models``, with ``workers`` processes."""
    repository = write_conch_repository(workdir / "conch-repo", models)
    return serve_conch(repository, workdir, workers)


def serve_conch(
    repository: Path,
    workdir: Path,
    workers: int = 1,
    extra: Sequence[str] = (),
) -> ServerProcess:
    """``conch serve REPOSITORY`` on free loopback ports, its log at ``workdir/conch.log``; ``extra``
    adds flags."""
    ports = Ports()
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += [f"--http-port={ports.http}", f"--grpc-port={ports.grpc}", f"--metrics-port={ports.metrics}"]
    command += [f"--workers={workers}", *extra]
    return ServerProcess("conch", command, ports, workdir / "conch.log", ready_timeout_s=120)


def triton_server(workdir: Path, models: Sequence[str]) -> ServerProcess:
    """Triton with one python-backend model per ONNX file, built by ``triton-server`` on first use."""
    return serve_triton(write_triton_repository(workdir / "triton-repo", models), workdir)


def serve_triton(repository: Path, workdir: Path, extra: Sequence[str] = ()) -> ServerProcess:
    """``triton-server --model-repository=REPOSITORY`` on free loopback ports (python backend only);
    ``extra`` adds flags."""
    if not TRITON_SERVER.exists():
        raise PeerUnavailable(f"not installable: {TRITON_SERVER} is missing")
    # The first call builds Triton's venv (minutes): done here so the readiness wait stays short.
    done = subprocess.run([str(TRITON_SERVER), "--help"], capture_output=True, text=True, timeout=1800)
    if "Usage: tritonserver" not in done.stdout + done.stderr:
        raise PeerUnavailable(f"not installable: triton-server --help: {_last_line(done.stderr)}")
    ports = Ports()
    command = [str(TRITON_SERVER), f"--model-repository={repository}", f"--http-port={ports.http}"]
    command += [f"--grpc-port={ports.grpc}", f"--metrics-port={ports.metrics}", *extra]
    return ServerProcess("triton", command, ports, workdir / "triton.log", ready_timeout_s=300)


def mlserver_server(workdir: Path, models: Sequence[str]) -> ServerProcess:
    """``mlserver start`` on a repository of the custom ONNX Runtime runtime, ports from ``MLSERVER_*``."""
    venv = ensure_venv("mlserver", MLSERVER_PACKAGES)
    repository = write_mlserver_repository(workdir / "mlserver-repo", models)
    ports = Ports()
    env = {
        # debug (MLServer's default) logs every request at DEBUG and turns on uvicorn's access log.
        "MLSERVER_DEBUG": "false",
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(ports.http),
        "MLSERVER_GRPC_PORT": str(ports.grpc),
        "MLSERVER_METRICS_PORT": str(ports.metrics),
        "PYTHONPATH": str(repository),
    }
    command = [str(venv / "bin" / "mlserver"), "start", str(repository)]
    return ServerProcess(
        "mlserver", command, ports, workdir / "mlserver.log", env=env, cwd=repository, ready_timeout_s=180
    )


def naive_server(workdir: Path, models: Sequence[str]) -> ServerProcess:
    """``uvicorn naive_app:app``, one process, on a folder of ``<model>/1/model.onnx``."""
    venv = ensure_venv("naive", NAIVE_PACKAGES)
    repository = write_conch_repository(workdir / "naive-repo", models)
    ports = Ports()
    command = [str(venv / "bin" / "python"), "-m", "uvicorn", "naive_app:app", "--app-dir", str(PEER_CODE)]
    command += ["--host", "127.0.0.1", f"--port={ports.http}", "--no-access-log", "--log-level=warning"]
    env = {"NAIVE_REPOSITORY": str(repository)}
    return ServerProcess("naive", command, ports, workdir / "naive.log", env=env, ready_timeout_s=120)


def ensure_venv(name: str, packages: Sequence[str]) -> Path:
    """``CACHE/name``, a venv with ``packages`` installed (once per package list)."""
    venv = CACHE / name
    stamp = venv / f".installed-{hashlib.sha256(' '.join(packages).encode()).hexdigest()[:10]}"
    if stamp.exists():
        return venv
    print(f"  installing {name} into {venv}: {' '.join(packages)}", flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--upgrade", "pip"],
        [str(venv / "bin" / "pip"), "install", "-q", *packages],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable(f"not installable: {' '.join(step[:3])} timed out") from exc
        if done.returncode != 0:
            raise PeerUnavailable(f"not installable: {_last_line(done.stderr or done.stdout)}")
    stamp.touch()
    return venv


def package_versions(python: Path, packages: Sequence[str]) -> str:
    """``name version`` of each installed distribution (``?`` where missing), from ``python``."""
    names = [package.split("[")[0].split("=")[0].split("<")[0] for package in packages]
    code = (
        "import importlib.metadata as m, sys\n"
        "def v(p):\n    try: return m.version(p)\n    except m.PackageNotFoundError: return '?'\n"
        "print(', '.join(f'{p} {v(p)}' for p in sys.argv[1:]))"
    )
    try:
        done = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "versions unknown"
    return done.stdout.strip() or "versions unknown"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


PEERS = {
    peer.key: peer
    for peer in (
        Peer(
            "conch",
            "conch",
            ("http", "grpc"),
            conch_server,
            lambda: Path(sys.executable),
            ("conch", "onnxruntime", "grpcio", "httptools"),
        ),
        Peer(
            "conch-2w",
            "conch, 2 workers",
            ("http", "grpc"),
            functools.partial(conch_server, workers=2),
            lambda: Path(sys.executable),
            ("conch", "onnxruntime", "grpcio", "httptools"),
        ),
        Peer(
            "triton",
            "Triton 2.51, python backend",
            ("http", "grpc"),
            triton_server,
            lambda: TRITON_VENV / "bin" / "python",
            ("nvidia-pytriton", "onnxruntime", "numpy"),
        ),
        Peer(
            "mlserver",
            "MLServer 1.7, adaptive batching",
            ("http",),
            mlserver_server,
            lambda: CACHE / "mlserver" / "bin" / "python",
            MLSERVER_PACKAGES,
        ),
        Peer(
            "naive",
            "naive FastAPI + ORT",
            ("http",),
            naive_server,
            lambda: CACHE / "naive" / "bin" / "python",
            NAIVE_PACKAGES,
        ),
    )
}
