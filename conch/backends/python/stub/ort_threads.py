"""ONNX Runtime sessions a Python model creates let their idle threads sleep, unless the model says.

Why: ONNX Runtime's intra-op threads spin between runs by default (``session.intra_op.allow_spinning``
1). In a model's process that spin holds a core for the whole gap between batches, and on a small
machine that core is the one the server's event loop needs. A session of the benchmark's ``s64`` MLP
(64 -> 256 -> 16, batch 19) run every 3 ms took 3.3 ms of CPU a run spinning and 0.15 ms sleeping;
at 32 gRPC clients on 2 cores, the Triton ``model.py`` running it was served 1.5x to 1.9x faster with
sleeping threads. conch's own ONNX backend has the same default (its ``allow_spinning`` 0).

How: when the model's code imports ``onnxruntime`` (at any time: in ``model.py``'s imports or inside
``initialize``), ``InferenceSession`` is wrapped so that a session whose options do not set the entry
gets it set to ``"0"``; options the model passes are given the entry, and keep everything else. A
model that sets the entry itself (``"1"`` to spin) keeps its value. Answers do not change: only how
the threads wait.

This module runs in the model's process, which may be another Python environment: it imports only the
standard library, and an ONNX Runtime whose API differs is left as it is.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

MODULE = "onnxruntime"
SPINNING = "session.intra_op.allow_spinning"
#: Set on ``InferenceSession`` once it is wrapped, so that it is wrapped once.
_WRAPPED = "_conch_idle_threads_sleep"


def install() -> None:
    """Wrap ``onnxruntime`` now if it is imported, else when it is."""
    if MODULE in sys.modules:
        wrap(sys.modules[MODULE])
    elif not any(isinstance(finder, _OnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())


def wrap(ort: ModuleType) -> None:
    """Make ``ort.InferenceSession`` default to sleeping idle threads (see the module's docstring)."""
    session_class = getattr(ort, "InferenceSession", None)
    options_class = getattr(ort, "SessionOptions", None)
    if session_class is None or options_class is None or getattr(session_class, _WRAPPED, False):
        return
    original = session_class.__init__

    @functools.wraps(original)
    def __init__(self: Any, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
        original(self, path_or_bytes, sleeping(options_class, sess_options), *args, **kwargs)

    session_class.__init__ = __init__
    setattr(session_class, _WRAPPED, True)


def sleeping(options_class: Any, options: Any) -> Any:
    """``options`` (new ones for None) with :data:`SPINNING` set to ``"0"`` unless it is set."""
    try:
        chosen = options_class() if options is None else options
        try:
            chosen.get_session_config_entry(SPINNING)
        except RuntimeError:  # ONNX Runtime's answer for an entry nobody set
            chosen.add_session_config_entry(SPINNING, "0")
        return chosen
    except Exception:  # an ONNX Runtime without config entries keeps its own defaults
        return options


class _OnImport(importlib.abc.MetaPathFinder):
    """Finds ``onnxruntime`` as the other finders do, and wraps it once its code has run."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # one import to watch; the rest of the search is the others'
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _WrappingLoader(spec.loader)
        return spec


class _WrappingLoader(importlib.abc.Loader):
    """``onnxruntime``'s own loader, then :func:`wrap`; anything else is asked of the loader itself."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        wrap(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
