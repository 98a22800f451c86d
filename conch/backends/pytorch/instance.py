"""One PyTorch model instance, on the CPU or on one GPU, run by the scheduler's worker thread.

On the CPU, inputs become tensors with ``torch.from_numpy`` and outputs arrays with ``.numpy()``: the
same memory, no copy. PyTorch releases the GIL while it computes, so ``count`` instances run at once.

On a GPU each instance has:

- its own CUDA stream, so instances on one GPU overlap their copies and kernels;
- one pinned host buffer per input, reused and grown when a larger batch comes: a copy from pinned
  memory runs asynchronously on the stream, a copy from pageable memory first stages through a
  buffer of the driver's, synchronously;
- outputs copied to the host once each, into pinned memory from PyTorch's caching host allocator,
  after their cast back to the config's datatype, and one stream synchronisation per batch.

Every run is ``torch.inference_mode()``: no autograd records, no version counters.
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from conch.backends.pytorch.options import PyTorchOptions
from conch.core.errors import InternalError, InvalidArgumentError
from conch.core.types import ExecutionTiming

# Inputs decoded from the wire are read-only views; the program never writes its inputs.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
_EXCEPTION_LINE = re.compile(r"^(?:builtins\.)?[A-Za-z_][\w.]*(?:Error|Exception): ")


@dataclass(frozen=True)
class Binding:
    """Where each config tensor goes: input name -> argument position, output name -> result position."""

    inputs: dict[str, int]
    outputs: dict[str, int]
    #: Config input name -> the reshape the program takes (without the batch dimension).
    input_reshape: dict[str, tuple[int, ...]]
    output_dims: dict[str, tuple[int, ...]]
    batching: bool
    #: Output name -> the numpy dtype the config declares, which fp16 results are cast back to.
    output_dtypes: dict[str, np.dtype[Any]]


class PyTorchInstance:
    """A module on ``device`` (``"cpu"`` or ``"cuda:N"``) and what one instance keeps between runs."""

    def __init__(
        self,
        torch: ModuleType,
        module: Any,
        binding: Binding,
        device: str,
        options: PyTorchOptions,
        label: str,
    ) -> None:
        self._torch = torch
        self._module = module
        self._binding = binding
        self._device = torch.device(device)
        self._gpu = self._device.type == "cuda"
        self._options = options
        self._label = label
        self._order = sorted(binding.inputs, key=binding.inputs.__getitem__)
        self._stream = torch.cuda.Stream(device=self._device) if self._gpu else None
        self._pinned: dict[str, Any] = {}

    @property
    def device(self) -> str:
        return str(self._device)

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        """Run the program on ``inputs`` (wire shapes); return ``output_names`` in wire shapes."""
        torch = self._torch
        start = time.perf_counter_ns()
        try:
            with torch.inference_mode(), self._on_stream():
                arguments = [self._to_device(name, inputs[name]) for name in self._order]
                ran = time.perf_counter_ns()
                results = self._results(self._module(*arguments))
                done = time.perf_counter_ns()
                on_host = {name: self._to_host(name, results) for name in output_names}
                if self._stream is not None:
                    self._stream.synchronize()
        except torch.cuda.OutOfMemoryError as exc:
            raise InternalError(
                f"{self._label} ran out of GPU memory on {self.device}: {_first_line(exc)}"
            ) from None
        except AssertionError as exc:  # a torch.export program's guards: "Guard failed: x.size()[0] <= 1024"
            raise InvalidArgumentError(f"{self._label} rejected the input: {_cause(exc)}") from None
        except (RuntimeError, torch.jit.Error) as exc:  # jit.Error: a `raise` inside TorchScript
            raise InternalError(f"{self._label} failed while running: {_cause(exc)}") from None
        timing.compute_input_ns = ran - start
        timing.compute_infer_ns = done - ran
        timing.compute_output_ns = time.perf_counter_ns() - done
        # Read only now: on a GPU the copies into ``on_host`` were complete at the synchronisation.
        return {name: self._to_wire(name, np.ascontiguousarray(t.numpy())) for name, t in on_host.items()}

    def _on_stream(self) -> Any:
        if self._stream is None:
            return contextlib.nullcontext()
        return self._torch.cuda.stream(self._stream)

    def _to_device(self, name: str, array: np.ndarray) -> Any:
        torch = self._torch
        reshape = self._binding.input_reshape.get(name)
        if reshape is not None:
            array = array.reshape(array.shape[:1] + reshape if self._binding.batching else reshape)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("="))
        tensor = torch.from_numpy(array)
        if self._gpu:
            tensor = self._pinned_copy(name, tensor).to(self._device, non_blocking=True)
        if self._options.half and tensor.is_floating_point():
            tensor = tensor.half()
        if self._options.channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    def _pinned_copy(self, name: str, tensor: Any) -> Any:
        """``tensor`` copied into this input's pinned buffer, grown to fit when it is too small."""
        torch = self._torch
        needed = tensor.numel() * tensor.element_size()
        buffer = self._pinned.get(name)
        if buffer is None or buffer.numel() < needed:
            buffer = torch.empty(max(needed, 1), dtype=torch.uint8, pin_memory=True)
            self._pinned[name] = buffer
        staged = buffer[:needed].view(tensor.dtype).view(tensor.shape)
        staged.copy_(tensor)
        return staged

    def _results(self, result: Any) -> Sequence[Any]:
        if isinstance(result, self._torch.Tensor):
            return (result,)
        if isinstance(result, (tuple, list)):
            return result
        raise InternalError(
            f"{self._label} returned {type(result).__name__}; conch takes a tensor or a tuple/list of tensors"
        )

    def _to_host(self, name: str, results: Sequence[Any]) -> Any:
        """Output ``name`` as a host tensor in the config's datatype (on a GPU, its copy enqueued)."""
        position = self._binding.outputs[name]
        if position >= len(results):
            raise InternalError(
                f"{self._label} returned {len(results)} result(s), but output '{name}' is result {position}"
            )
        tensor = results[position]
        wanted = self._binding.output_dtypes.get(name)
        if tensor.is_floating_point() and wanted is not None and wanted.kind == "f":
            tensor = tensor.to(getattr(self._torch, wanted.name))
        if self._gpu:
            host = self._torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            tensor = host
        return tensor

    def _to_wire(self, name: str, array: np.ndarray) -> np.ndarray:
        dims = self._binding.output_dims.get(name)
        if dims is None:
            return array
        return array.reshape(array.shape[:1] + dims if self._binding.batching else dims)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0][:500]


def _cause(exc: BaseException) -> str:
    """The line that says what went wrong, without the interpreter's traceback or file paths.

    TorchScript's errors open with the traceback of its interpreter (source lines, paths) and end with
    the exception, ``builtins.RuntimeError: ...``: the last such line is the cause. Other errors say it
    first; CUDA's then add advice lines (``CUDA_LAUNCH_BLOCKING=1``). CUDA's own words must stay: they
    are what moves a version to its CPU fallback.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    cause = raised[-1].removeprefix("builtins.") if raised else lines[0] if lines else type(exc).__name__
    return cause[:500]
