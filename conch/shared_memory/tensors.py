"""A request's tensors in shared memory: inputs read from regions, outputs written into them.

Each frontend makes one :class:`RegionLeases` per request, gives it to its decoder, and releases it
once the response is written: the regions a request names stay mapped until then (see
``registry.py``). Input bytes are copied out of the region when the request is decoded, so the model
never reads memory the client may be rewriting; outputs are written after the model has answered,
and their response entries then carry no data (nor parameters), as in Triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conch.core import codecs
from conch.core import reserved_parameters as reserved
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, SharedMemoryRef
from conch.shared_memory.registry import Region, SharedMemoryRegistry


def shared_memory_ref(tensor: str, parameters: Mapping[str, Any]) -> SharedMemoryRef | None:
    """The tensor's place in a region from its ``shared_memory_*`` parameters (None: it has none)."""
    region = parameters.get(reserved.SHARED_MEMORY_REGION)
    if region is None:
        for key in (reserved.SHARED_MEMORY_OFFSET, reserved.SHARED_MEMORY_BYTE_SIZE):
            if key in parameters:
                raise InvalidArgumentError(
                    f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor "
                    f"'{tensor}'"
                )
        return None
    if not isinstance(region, str):
        raise InvalidArgumentError(
            f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor}', "
            "expected a string"
        )
    if reserved.SHARED_MEMORY_BYTE_SIZE not in parameters:
        raise InvalidArgumentError(
            f"'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
            f"tensor '{tensor}'"
        )
    offset = _whole(tensor, reserved.SHARED_MEMORY_OFFSET, parameters.get(reserved.SHARED_MEMORY_OFFSET, 0))
    size = _whole(tensor, reserved.SHARED_MEMORY_BYTE_SIZE, parameters[reserved.SHARED_MEMORY_BYTE_SIZE])
    return SharedMemoryRef(region, offset, size)


def _whole(tensor: str, key: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(
            f"invalid value for '{key}' parameter for tensor '{tensor}': expected a whole number >= 0, "
            f"got {value!r}"
        )
    return value


@dataclass
class RegionLeases:
    """The regions one request holds, from its decoding to its answer."""

    registry: SharedMemoryRegistry
    held: list[Region] = field(default_factory=list)

    def read_input(
        self, name: str, datatype: str, shape: tuple[int, ...], model: str, ref: SharedMemoryRef
    ) -> np.ndarray:
        """Input ``name`` decoded from a copy of its bytes in the region."""
        data = self._hold(ref.region).read(ref.offset, ref.byte_size)
        return codecs.from_bytes(name, datatype, shape, data, model)

    def check_output(self, ref: SharedMemoryRef) -> None:
        """Hold an output's region and check its place there before the model runs."""
        self._hold(ref.region).check(ref.offset, ref.byte_size)

    def write_outputs(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """Write each output asked into a region there."""
        refs = {o.name: o.shared_memory for o in request.outputs if o.shared_memory is not None}
        if not refs:  # the common case: nothing to write, no pass over the outputs
            return
        for tensor in response.outputs:
            ref = refs.get(tensor.name)
            if ref is None:
                continue
            data = codecs.to_bytes(tensor.data)
            if len(data) > ref.byte_size:
                raise InvalidArgumentError(
                    f"shared memory size specified with the request for output '{tensor.name}' "
                    f"({ref.byte_size} bytes) should be at least {len(data)} bytes to hold the results"
                )
            self._hold(ref.region).write(ref.offset, data)

    def release(self) -> None:
        for region in self.held:
            self.registry.release(region)
        self.held.clear()

    def _hold(self, name: str) -> Region:
        for region in self.held:
            if region.name == name:
                return region
        region = self.registry.hold(name)
        self.held.append(region)
        return region
