"""What the sequence batcher reads from a config, and the control, CORRID and state tensors it builds."""

from __future__ import annotations

import numpy as np

from conch.repository.config import parse_config
from conch.scheduling.sequence_settings import DIRECT, OLDEST, SequenceSettings

CONTROLS = """
control_input [
  { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ -1, 2.5 ] } ] },
  { name: "E" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
  { name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 7, 9 ] } ] },
  { name: "ID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
]
state [ { input_name: "H" output_name: "H_OUT" data_type: TYPE_INT64 dims: [ 2, -1 ] } ]
"""


def settings(max_batch_size: int, strategy: str = "") -> SequenceSettings:
    text = f'name: "m" max_batch_size: {max_batch_size} sequence_batching {{ {strategy} {CONTROLS} }}'
    return SequenceSettings.from_config(parse_config(text))


def test_each_flag_takes_its_configured_false_and_true_values_and_datatype() -> None:
    s = settings(4)
    row = s.row_inputs(
        {"X": np.zeros((1, 3), np.float32)}, "abc", start=True, end=False, state=s.initial_state()
    )
    assert row["S"].dtype == np.float32 and row["S"].tolist() == [[2.5]]
    assert row["E"].dtype == np.bool_ and row["E"].tolist() == [[False]]
    assert row["R"].dtype == np.int32 and row["R"].tolist() == [[9]]
    assert row["ID"].dtype == object and row["ID"].tolist() == [["abc"]]
    assert row["X"].shape == (1, 3)
    empty = s.not_ready_inputs(row)
    assert (empty["S"].tolist(), empty["E"].tolist(), empty["R"].tolist(), empty["ID"].tolist()) == (
        [[-1.0]],
        [[False]],
        [[7]],
        [[""]],
    )
    assert empty["X"] is row["X"]  # another row's data: the model is told to ignore it


def test_without_batching_controls_are_one_element_and_states_their_dims() -> None:
    s = settings(0)
    row = s.row_inputs({}, "x", start=False, end=True, state=s.initial_state())
    assert row["E"].shape == (1,) and row["E"].tolist() == [True]
    assert row["H"].shape == (2, 1)  # a variable dimension starts at 1, as in Triton
    assert s.slots_per_instance == 1


def test_the_first_state_is_zeros_and_the_next_one_is_copied_from_the_answer() -> None:
    s = settings(4)
    assert s.initial_state()["H"].tolist() == [[[0], [0]]]
    answer = {"H_OUT": np.arange(4).reshape(1, 2, 2)}
    kept = s.next_state(answer)
    answer["H_OUT"][0, 0, 0] = 99
    assert kept["H"].tolist() == [[[0, 1], [2, 3]]]  # a copy, not a view of the batch output


def test_strategy_defaults_follow_triton() -> None:
    direct = settings(4)
    assert direct.strategy == DIRECT and direct.slots_per_instance == 4
    assert direct.idle_ns == 1_000_000_000
    oldest = settings(4, "oldest { max_candidate_sequences: 6 max_queue_delay_microseconds: 300 }")
    assert oldest.strategy == OLDEST and oldest.slots_per_instance == 6
    assert oldest.preferred_batch_sizes == frozenset([4]) and oldest.max_queue_delay_ns == 300_000
