"""``EXECUTION_ENV_PATH``: the Python environment a model's processes run in, when not the server's.

As in Triton, the config's ``parameters`` name it: a packed environment (``.tar.gz`` in conda-pack's
format: the environment's root folder, ``bin/python`` in it) or, as conch adds, a directory that is a
virtual environment. ``$$TRITON_MODEL_DIRECTORY`` in the value is the model's folder; a relative path
is taken from there. A packed environment is unpacked once into the cache
(``~/.cache/conch/python-envs/<digest of the archive>``, ``CONCH_CACHE_DIR`` to move it), its
``bin/conda-unpack`` is run when it has one, and later loads reuse it.

The environment must have numpy (the process that runs the model uses it, as Triton's stub does);
it needs nothing else of the server's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.python.process import ProcessSettings
from conch.core.errors import InvalidArgumentError

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"


def process_settings(config: mc.ModelConfig, folder: Path, base: ProcessSettings) -> ProcessSettings:
    """``base`` (the server's interpreter) unless the config names an environment of its own."""
    if PARAMETER not in config.parameters:
        return base
    value = config.parameters[PARAMETER].string_value.replace(MODEL_DIRECTORY, str(folder))
    path = Path(value)
    if not path.is_absolute():
        path = folder / path
    shown = config.parameters[PARAMETER].string_value
    if path.is_dir():
        root = path
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        root = unpacked(path)
    else:
        raise InvalidArgumentError(
            f"parameters {PARAMETER} '{shown}' is neither a .tar.gz packed environment nor a directory; "
            "pack the environment with conda-pack (or tar czf of a venv), or point at a venv folder"
        )
    python = next((root / "bin" / n for n in ("python3", "python") if (root / "bin" / n).exists()), None)
    if python is None:
        raise InvalidArgumentError(
            f"parameters {PARAMETER} '{shown}' has no bin/python: it is not an environment"
        )
    environment = dict(base.environment if base.environment is not None else os.environ)
    environment["PATH"] = f"{root / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
    environment.pop("VIRTUAL_ENV", None)
    return replace(base, python=str(python), environment=environment)


def cache_root() -> Path:
    configured = os.environ.get("CONCH_CACHE_DIR")
    base = Path(configured) if configured else Path.home() / ".cache" / "conch"
    return base / "python-envs"


def unpacked(archive: Path) -> Path:
    """The folder ``archive`` is unpacked in, unpacking it the first time (one process at a time)."""
    digest = hashlib.sha256()
    with archive.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    target = cache_root() / digest.hexdigest()[:20]
    done = target / ".conch-unpacked"
    if done.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target)
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(target, filter="tar")
        except (tarfile.TarError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise InvalidArgumentError(
                f"the packed environment {archive.name} does not unpack ({reason})"
            ) from None
        unpack = target / "bin" / "conda-unpack"
        if unpack.exists():
            subprocess.run([str(unpack)], cwd=target, check=False, capture_output=True)
        done.touch()
    return target
