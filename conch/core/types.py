"""Request, response and tensor types shared by every frontend, the scheduler and the backends.

Tensors hold numpy arrays. Frontends build them as views over the wire bytes where the wire allows
(the HTTP binary extension, gRPC ``raw_input_contents``), so a tensor is decoded once and not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from conch.observability.tracing import RequestTrace


@dataclass(slots=True)
class Tensor:
    """A named tensor with its V2 datatype; ``data.shape`` is the shape the client sent or will get."""

    name: str
    datatype: str
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @classmethod
    def of(cls, name: str, data: np.ndarray) -> Tensor:
        """``data`` as the tensor ``name``, its V2 datatype read off the array's dtype."""
        datatype = _DATATYPE_NAMES.get(data.dtype)
        if datatype is None:
            datatype = _datatype_name(data.dtype)
        return cls(name, datatype, data)


#: V2 names of the dtypes :meth:`Tensor.of` has met. Every output of every response passes there:
#: the lookup and import it replaces cost ~1.2 us a tensor, the dict ~0.04 us.
_DATATYPE_NAMES: dict[np.dtype, str] = {}


def _datatype_name(dtype: np.dtype) -> str:
    # Imported here: datatypes brings tritonclient, which conch serve must not import to parse its flags.
    from conch.core.datatypes import from_numpy

    datatype = from_numpy(dtype).name
    if len(_DATATYPE_NAMES) < 64:  # string dtypes differ by length: keep the table bounded
        _DATATYPE_NAMES[dtype] = datatype
    return datatype


@dataclass(frozen=True, slots=True)
class SharedMemoryRef:
    """Where a tensor lies in a registered shared-memory region: ``byte_size`` bytes at ``offset``."""

    region: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for; ``binary`` is the HTTP binary-extension choice (None: default).

    ``classification`` > 0 asks for the output's top classes instead of its values
    (:mod:`conch.core.classification`); ``shared_memory`` asks for it to be written into a region.
    """

    name: str
    binary: bool | None = None
    classification: int = 0
    shared_memory: SharedMemoryRef | None = None


@dataclass(slots=True)
class InferenceRequest:
    """One inference call, whatever protocol it came over.

    ``model_version`` is empty when the client let the version policy choose. An empty ``outputs``
    list means every output of the model.
    """

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    #: Its span while traced (:mod:`conch.observability.tracing`); None while tracing is off.
    trace: RequestTrace | None = None

    def batch_size(self, batching: bool) -> int:
        """Rows in this request: the first dimension for a batching model, else 1."""
        if not batching or not self.inputs or not self.inputs[0].data.shape:
            return 1
        return int(self.inputs[0].data.shape[0])


@dataclass(slots=True)
class InferenceResponse:
    """The answer to an :class:`InferenceRequest`, in the order the outputs were requested."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    #: Nanoseconds the request waited in its model's queue, then spent from there to its outputs
    #: (the execution of its batch, inputs and outputs moved included): the log record's figures.
    queue_ns: int = 0
    compute_ns: int = 0


@dataclass(slots=True)
class ExecutionTiming:
    """Nanoseconds one execution spent preparing inputs, running the model and collecting outputs."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    @property
    def spent_ns(self) -> int:
        """The whole execution: inputs, the run and outputs."""
        return self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns
