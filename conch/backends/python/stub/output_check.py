"""What a model's outputs must be: the datatype and dims of its config, and the request's batch.

Triton passes a Python model's outputs through as they come, so a model that returns INT64 where its
config says FP32, or shape ``[3]`` where it says ``[4]``, answers 200 with the wrong data. conch checks
each output the config declares, in the model's process (the server's event loop pays nothing):

- its datatype is the config's (BYTES takes numpy object arrays of ``str`` or ``bytes``);
- its shape matches the config's ``dims`` (or ``reshape``), ``-1`` matching any size;
- with ``max_batch_size`` > 0, the first dimension is the batch and equals the request's batch.

A mismatch is the response's error (a 500 naming the model, the output, what the config says and
what came back). ``parameters { key: "output_check" value: { string_value: "warn" } }`` logs it
instead, once per output, and passes the output on, for a model that relied on Triton's looseness.
Outputs the config does not declare are not checked. The check costs well under 1 us an output
(a dictionary lookup and a tuple comparison) where the dims have no ``-1``.

This module runs in the model's process: it imports only the standard library, numpy and conch_ipc.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conch_ipc
import numpy as np

PARAMETER = "output_check"
MODES = ("error", "warn")
#: ``pb_utils.LogLevel.WARNING``
WARNING = 1


class OutputRules:
    """The outputs one model's config declares, and what to do when one does not match."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.model = str(config.get("name", ""))
        self.max_batch_size = int(config.get("max_batch_size", 0))
        mode = config.get("parameters", {}).get(PARAMETER, {}).get("string_value", "error")
        mode = mode.strip().lower() or "error"
        if mode not in MODES:
            raise ValueError(
                f"parameter '{PARAMETER}' of model '{self.model}' is '{mode}'; it is 'error' (the "
                "default: a wrong output fails its request) or 'warn' (logged, passed on)"
            )
        self.warn_only = mode == "warn"
        self._declared: dict[str, tuple[str, tuple[tuple[int, ...], ...]]] = {}
        for entry in config.get("output", []):
            datatype = str(entry.get("data_type", "")).removeprefix("TYPE_")
            shapes = [tuple(int(d) for d in entry.get("dims", []))]
            reshape = (entry.get("reshape") or {}).get("shape")
            if reshape is not None:
                shapes.append(tuple(int(d) for d in reshape))
            self._declared[str(entry["name"])] = (
                "BYTES" if datatype == "STRING" else datatype,
                tuple(shapes),
            )
        self._datatypes: dict[np.dtype[Any], str] = {}
        self.warned: set[str] = set()

    def batch_of(self, inputs: list[Any]) -> int | None:
        """A request's batch size (its inputs' references): the first dimension of its first input,
        for a batching model."""
        if self.max_batch_size <= 0 or not inputs:
            return None
        shape = inputs[0][2]  # a TensorRef, or the plain tuple it travels as: (name, datatype, shape, ...)
        return int(shape[0]) if shape else None

    def check(
        self, outputs: list[tuple[str, np.ndarray]], batch: int | None, log: Callable[[str, int], None]
    ) -> str | None:
        """The first output that does not match, as the response's error; with ``output_check: warn``,
        each one logged (``log(message, 1)``, a warning) once per output and passed on (None)."""
        declared, datatypes = self._declared, self._datatypes
        for name, array in outputs:
            expected = declared.get(name)
            if expected is None:
                continue
            shape = array.shape
            if datatypes.get(array.dtype) == expected[0] and (
                (shape and (batch is None or shape[0] == batch) and shape[1:] in expected[1])
                if self.max_batch_size > 0
                else shape in expected[1]
            ):
                continue  # the common case, inline: no -1 to match
            problem = self.problem(name, array, batch)
            if problem is None:
                continue
            if not self.warn_only:
                return problem
            if name not in self.warned:
                self.warned.add(name)
                log(f"{problem} (logged once per output)", WARNING)
        return None

    def problem(self, name: str, array: np.ndarray, batch: int | None) -> str | None:
        """Why output ``name`` does not match the config (None: it does, or it is not declared).
        ``batch``: the request's batch size, None where it is not known (a response sender's)."""
        declared = self._declared.get(name)
        if declared is None:
            return None
        datatype, shapes = declared
        returned = self._datatypes.get(array.dtype) or self._datatype(array)
        shape = array.shape
        if returned == datatype:
            if self.max_batch_size > 0:
                if shape and (batch is None or shape[0] == batch) and shape[1:] in shapes:
                    return None  # the common case, a tuple comparison: no -1 to match
            elif shape in shapes:
                return None
            for dims in shapes:
                if self._fits(shape, dims, batch):
                    return None
        says = f"{datatype} {self._expected(shapes[0], batch)}"
        if self.max_batch_size > 0:
            says += f" (max_batch_size {self.max_batch_size}: the first dimension is the batch"
            says += f", {batch} in this request)" if batch is not None else ")"
        return (
            f"model '{self.model}' returned output '{name}' as {returned} {list(shape)}, but its config "
            f'says {says}; return what the config says, or set parameters {{ key: "{PARAMETER}" '
            'value: { string_value: "warn" } } to pass such outputs on with a warning'
        )

    def _fits(self, shape: tuple[int, ...], dims: tuple[int, ...], batch: int | None) -> bool:
        if self.max_batch_size > 0:
            if not shape or (batch is not None and shape[0] != batch):
                return False
            shape = shape[1:]
        return len(shape) == len(dims) and all(d == -1 or d == s for d, s in zip(dims, shape, strict=True))

    def _expected(self, dims: tuple[int, ...], batch: int | None) -> list[int]:
        return [batch if batch is not None else -1, *dims] if self.max_batch_size > 0 else list(dims)

    def _datatype(self, array: np.ndarray) -> str:
        try:
            found = conch_ipc.datatype_of(array)
        except TypeError:
            found = f"numpy {array.dtype}"
        self._datatypes[array.dtype] = found
        return found
