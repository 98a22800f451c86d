"""What the sequence batcher takes from ``sequence_batching``, and the tensors it adds to a request.

Read once at load (the config is already checked by :mod:`conch.repository.sequence_config`), so
building a row's inputs costs a few small arrays: the controls, the CORRID and the slot's state.

A row is one request of a sequence as the model sees it: for a batching model every tensor has a
leading dimension of 1 (controls ``[1, 1]``, states ``[1, *dims]``), for a model without batching the
controls are ``[1]`` and the states ``dims``, as in Triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.repository.sequence_config import CORRID, END, READY, START, control_datatype

#: Triton's default ``max_sequence_idle_microseconds``.
DEFAULT_IDLE_US = 1_000_000
DIRECT = "direct"
OLDEST = "oldest"


@dataclass(frozen=True)
class ControlTensor:
    """One control input: its graph name, kind and the values it takes for false and true."""

    name: str
    kind: int
    dtype: np.dtype
    false_value: Any = None
    true_value: Any = None


@dataclass(frozen=True)
class StateTensor:
    """One implicit state: fed to ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    initial: np.ndarray  # one row, without the batch dimension


@dataclass(frozen=True)
class SequenceSettings:
    """Everything the sequence batcher needs from the config."""

    model: str
    max_batch_size: int
    strategy: str = DIRECT
    slots_per_instance: int = 1
    idle_ns: int = DEFAULT_IDLE_US * 1000
    max_queue_delay_ns: int = 0
    preferred_batch_sizes: frozenset[int] = frozenset()
    minimum_slot_utilization: float = 0.0
    controls: tuple[ControlTensor, ...] = ()
    corrid: ControlTensor | None = None
    states: tuple[StateTensor, ...] = ()

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> SequenceSettings:
        batching = config.sequence_batching
        rows = max(config.max_batch_size, 1)
        oldest = batching.HasField("oldest")
        controls, corrid = _controls(batching)
        preferred = frozenset(batching.oldest.preferred_batch_size)
        if oldest and not preferred and config.max_batch_size > 0:
            preferred = frozenset([config.max_batch_size])  # Triton's default for the oldest strategy
        return cls(
            model=config.name,
            max_batch_size=config.max_batch_size,
            strategy=OLDEST if oldest else DIRECT,
            slots_per_instance=(batching.oldest.max_candidate_sequences or rows) if oldest else rows,
            idle_ns=(batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) * 1000,
            max_queue_delay_ns=(
                batching.oldest.max_queue_delay_microseconds
                if oldest
                else batching.direct.max_queue_delay_microseconds
            )
            * 1000,
            preferred_batch_sizes=preferred,
            minimum_slot_utilization=batching.direct.minimum_slot_utilization,
            controls=controls,
            corrid=corrid,
            states=tuple(_state(state) for state in batching.state),
        )

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    @property
    def state_outputs(self) -> list[str]:
        return [state.output_name for state in self.states]

    def initial_state(self) -> dict[str, np.ndarray]:
        """A new sequence's state inputs, one row each."""
        return {state.input_name: self._row(state.initial) for state in self.states}

    def row_inputs(
        self,
        inputs: dict[str, np.ndarray],
        sequence_id: int | str,
        start: bool,
        end: bool,
        state: dict[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The client's inputs plus the controls, the CORRID and the state of one request."""
        flags = {START: start, END: end, READY: True}
        full = dict(inputs)
        for control in self.controls:
            full[control.name] = self._flag(control, flags[control.kind])
        if self.corrid is not None:
            full[self.corrid.name] = self._corrid(sequence_id)
        full.update(state)
        return full

    def not_ready_inputs(self, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """An empty slot's row in a ``direct`` batch: another row's tensors with READY, START and END
        false and CORRID 0, so the model can tell the row carries nothing."""
        empty = dict(like)
        for control in self.controls:
            empty[control.name] = self._flag(control, False)
        if self.corrid is not None:
            empty[self.corrid.name] = self._corrid("" if self.corrid.dtype.kind == "O" else 0)
        return empty

    def next_state(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One answered row's state outputs, copied, as the state inputs of the sequence's next request."""
        return {
            s.input_name: np.array(outputs[s.output_name]) for s in self.states if s.output_name in outputs
        }

    def _flag(self, control: ControlTensor, value: bool) -> np.ndarray:
        return self._row(np.array([control.true_value if value else control.false_value], control.dtype))

    def _corrid(self, sequence_id: int | str) -> np.ndarray:
        assert self.corrid is not None
        if self.corrid.dtype.kind == "O":
            return self._row(np.array([str(sequence_id)], dtype=object))
        return self._row(np.array([sequence_id], dtype=self.corrid.dtype))

    def _row(self, array: np.ndarray) -> np.ndarray:
        return array[np.newaxis] if self.batching else array


def _controls(
    batching: mc.ModelSequenceBatching,
) -> tuple[tuple[ControlTensor, ...], ControlTensor | None]:
    controls: list[ControlTensor] = []
    corrid = None
    for entry in batching.control_input:
        control = entry.control[0]
        dtype = datatypes.from_config_type(control_datatype(control)).numpy
        if control.kind == CORRID:
            corrid = ControlTensor(entry.name, CORRID, dtype)
            continue
        values = control.int32_false_true or control.fp32_false_true or control.bool_false_true
        controls.append(ControlTensor(entry.name, control.kind, dtype, values[0], values[1]))
    return tuple(controls), corrid


def _state(state: mc.ModelSequenceBatching.State) -> StateTensor:
    dtype = datatypes.from_config_type(state.data_type).numpy
    if state.initial_state:
        dims = tuple(state.initial_state[0].dims)
    else:
        # Triton leaves a first state uninitialized, with 1 for each variable dimension; conch zeroes it.
        dims = tuple(1 if d < 0 else d for d in state.dims)
    initial = np.zeros(dims, dtype=dtype) if dtype.kind != "O" else np.full(dims, "", dtype=object)
    return StateTensor(state.input_name, state.output_name, initial)
