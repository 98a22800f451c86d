"""The ensemble's config checks: its own data-flow graph (plan), and its agreement with step models.

Configs are written as a user writes ``config.pbtxt``; each test breaks one rule and reads the
message a user would see in the repository index.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.core.errors import ErrorKind, InvalidArgumentError
from conch.repository.config import parse_config
from conch.scheduling.ensemble.plan import ensemble_problems, plan_ensemble
from conch.scheduling.ensemble.step_checks import nested_cycle, step_problems
from conch.validation.validator import validate_model
from tests.fixtures.ensembles import Step, ensemble_config, write_ensemble

X = ("X", "TYPE_FP32", [4])
Y = ("Y", "TYPE_FP32", [4])
#: X -> pre -> (left, right) -> join -> Y: a diamond.
DIAMOND: list[Step] = [
    ("pre", {"INPUT0": "X"}, {"OUTPUT0": "P"}),
    ("left", {"INPUT0": "P"}, {"OUTPUT0": "L"}),
    ("right", {"INPUT0": "P"}, {"OUTPUT0": "R"}),
    ("join", {"INPUT0": "L", "INPUT1": "R"}, {"OUTPUT0": "Y"}),
]


def problems_of(steps: list[Step], inputs=(X,), outputs=(Y,), extra: str = "") -> list[str]:
    return ensemble_problems(parse_config(ensemble_config("e", inputs, outputs, steps, extra=extra)))


def single_problem(steps: list[Step], **kwargs: object) -> str:
    found = problems_of(steps, **kwargs)  # type: ignore[arg-type]
    assert len(found) == 1, found
    return found[0]


def test_a_diamond_is_planned_with_each_step_after_the_steps_it_reads() -> None:
    shuffled = [DIAMOND[3], DIAMOND[1], DIAMOND[0], DIAMOND[2]]
    plan = plan_ensemble(parse_config(ensemble_config("e", [X], [Y], shuffled)))
    assert [step.model_name for step in plan.steps] == ["pre", "left", "right", "join"]
    assert [step.index for step in plan.steps] == [2, 1, 3, 0]  # indexes stay the config's
    assert plan.steps[3].reads == {"L", "R"}
    assert (plan.inputs, plan.outputs) == (("X",), ("Y",))


def test_model_version_minus_one_means_the_policys_version_and_a_number_that_version() -> None:
    plan = plan_ensemble(
        parse_config(
            ensemble_config("e", [X], [Y], [("a", {"I": "X"}, {"O": "T"}), ("b", {"I": "T"}, {"O": "Y"}, 3)])
        )
    )
    assert [step.model_version for step in plan.steps] == ["", "3"]


def test_an_output_no_step_writes_is_named() -> None:
    message = single_problem([("a", {"I": "X"}, {"O": "T"})], outputs=[Y, ("T", "TYPE_FP32", [4])])
    assert "output 'Y' is not written by any step" in message


def test_a_step_input_without_a_source_names_the_step_and_the_tensor() -> None:
    message = single_problem([("a", {"I": "X", "J": "nowhere"}, {"O": "Y"})])
    assert "step 0 (model 'a') reads ensemble tensor 'nowhere'" in message
    assert "for its input 'J'" in message


def test_an_input_no_step_reads_is_named() -> None:
    message = single_problem([("a", {"I": "X"}, {"O": "Y"})], inputs=[X, ("Z", "TYPE_FP32", [4])])
    assert "input 'Z' is not read by any step" in message


def test_a_written_tensor_nobody_reads_is_named_with_its_step() -> None:
    message = single_problem([("a", {"I": "X"}, {"O": "Y", "O2": "spare"})])
    assert "tensor 'spare' is written by step 0 but never read" in message


def test_a_cycle_names_the_steps_that_wait_on_each_other() -> None:
    message = single_problem(
        [
            ("a", {"I": "X", "J": "B_OUT"}, {"O": "A_OUT"}),
            ("b", {"I": "A_OUT"}, {"O": "B_OUT", "O2": "Y"}),
        ]
    )
    assert "form a cycle" in message
    assert "step 0 (model 'a')" in message and "step 1 (model 'b')" in message


def test_a_tensor_written_twice_or_over_an_ensemble_input_is_refused() -> None:
    twice = problems_of([("a", {"I": "X"}, {"O": "Y"}), ("b", {"I": "X"}, {"O": "Y"})])
    assert any("tensor 'Y' is written twice, by step 0 and step 1 (model 'b')" in p for p in twice)
    over_input = problems_of([("a", {"I": "X"}, {"O": "Y", "O2": "X"})])
    assert any("writes 'X' (from its output 'O2'), which is an ensemble input" in p for p in over_input)


def test_fields_an_ensemble_cannot_have() -> None:
    found = problems_of(DIAMOND, extra="instance_group [ { count: 2 } ]\n")
    assert found == [
        "ensemble 'e' sets instance_group; an ensemble runs no instances of its own (its steps' models do), "
        "so remove it"
    ]
    self_step = problems_of([("e", {"I": "X"}, {"O": "Y"})])
    assert self_step == ["ensemble 'e' step 0 runs the ensemble itself; an ensemble cannot be its own step"]


def test_an_ensemble_without_steps_or_tensors_says_what_to_declare() -> None:
    found = ensemble_problems(parse_config('name: "e" platform: "ensemble"'))
    assert any("has no steps" in p for p in found)
    assert any("declares no input" in p for p in found)
    assert any("declares no output" in p for p in found)


def test_plan_ensemble_raises_the_first_problem_as_a_400() -> None:
    config = parse_config(ensemble_config("e", [X], [Y], [("a", {"I": "X"}, {"O": "T"})]))
    with pytest.raises(InvalidArgumentError) as raised:
        plan_ensemble(config)
    assert raised.value.kind is ErrorKind.INVALID_ARGUMENT
    assert raised.value.message == ensemble_problems(config)[0]


# The step models' completed configs, as the loader leaves them (ONNX auto-complete's shapes).
def step_config(
    name: str,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    max_batch_size: int = 0,
    optional: str = "",
):
    def tensors(specs: list[tuple[str, str, list[int]]]) -> str:
        return ", ".join(
            f'{{ name: "{n}" data_type: {t} dims: {d} {"optional: true" if n == optional else ""} }}'
            for n, t, d in specs
        )

    return parse_config(
        f'name: "{name}" max_batch_size: {max_batch_size} '
        f"input [ {tensors(inputs)} ] output [ {tensors(outputs)} ]"
    )


TWO_STEPS: list[Step] = [("a", {"I": "X"}, {"O": "T"}), ("b", {"I": "T"}, {"O": "Y"})]


def checked(steps: list[Step], configs: dict, max_batch_size: int = 0) -> list[str]:
    config = parse_config(ensemble_config("e", [X], [Y], steps, max_batch_size))
    return step_problems(config, plan_ensemble(config), configs)


def test_consistent_step_models_pass() -> None:
    configs = {
        0: step_config("a", [("I", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])]),
        1: step_config("b", [("I", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])]),
    }
    assert checked(TWO_STEPS, configs) == []


def test_a_datatype_disagreement_names_the_tensor_and_both_sides() -> None:
    configs = {
        0: step_config("a", [("I", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])]),
        1: step_config("b", [("I", "TYPE_INT32", [4])], [("O", "TYPE_FP32", [4])]),
    }
    assert checked(TWO_STEPS, configs) == [
        "ensemble 'e' tensor 'T' is TYPE_FP32 for step 0 (model 'a') output 'O' but TYPE_INT32 for step 1 "
        "(model 'b') input 'I'; make the datatypes agree"
    ]


def test_a_shape_disagreement_is_refused_but_wildcards_agree() -> None:
    wrong = {0: step_config("a", [("I", "TYPE_FP32", [5])], [("O", "TYPE_FP32", [4])])}
    [message] = checked(TWO_STEPS, wrong)
    assert (
        "tensor 'X' has shape [4] for ensemble input 'X' but [5] for step 0 (model 'a') input 'I'" in message
    )
    wildcard = {0: step_config("a", [("I", "TYPE_FP32", [-1])], [("O", "TYPE_FP32", [-1])])}
    assert checked(TWO_STEPS, wildcard) == []


def test_a_batching_ensemble_may_feed_a_step_without_batching_that_spells_the_batch_out() -> None:
    spelled = {0: step_config("a", [("I", "TYPE_FP32", [-1, 4])], [("O", "TYPE_FP32", [-1, 4])])}
    assert checked(TWO_STEPS, spelled, max_batch_size=8) == []
    unbatched = {0: step_config("a", [("I", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])])}
    [message] = checked(TWO_STEPS, unbatched, max_batch_size=8)
    assert "has shape [-1, 4] for ensemble input 'X' but [4] for step 0" in message


def test_the_ensembles_max_batch_size_may_not_exceed_a_batching_steps() -> None:
    small = {0: step_config("a", [("I", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])], max_batch_size=4)}
    [message] = checked(TWO_STEPS, small, max_batch_size=8)
    assert message == (
        "ensemble 'e' has max_batch_size 8 but its step 0 (model 'a') accepts at most 4 rows; lower the "
        "ensemble's max_batch_size to 4 or raise the step model's"
    )
    assert checked(TWO_STEPS, small, max_batch_size=4) == []


def test_step_maps_must_name_the_step_models_tensors() -> None:
    config = step_config("a", [("I", "TYPE_FP32", [4]), ("K", "TYPE_FP32", [4])], [("OUT", "TYPE_FP32", [4])])
    found = checked(TWO_STEPS, {0: config})
    assert "ensemble 'e' step 0 (model 'a') does not map input 'K' of 'a'" in found[0]
    assert "maps 'O', which is not an output of 'a'; its outputs are ['OUT']" in found[1]
    optional = step_config(
        "a", [("I", "TYPE_FP32", [4]), ("K", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])], optional="K"
    )
    assert checked(TWO_STEPS, {0: optional}) == []
    extra = {0: step_config("a", [("J", "TYPE_FP32", [4])], [("O", "TYPE_FP32", [4])])}
    assert any(
        "maps 'I', which is not an input of 'a'; its inputs are ['J']" in p for p in checked(TWO_STEPS, extra)
    )


def test_steps_not_loaded_are_not_checked() -> None:
    mismatched = step_config("b", [("I", "TYPE_INT8", [9])], [("O", "TYPE_INT8", [9])])
    assert checked(TWO_STEPS, {}) == []
    assert checked(TWO_STEPS, {1: mismatched}) != []


def test_ensembles_that_include_each_other_are_a_cycle() -> None:
    plan = plan_ensemble(parse_config(ensemble_config("e", [X], [Y], [("inner", {"I": "X"}, {"O": "Y"})])))
    inner_steps = {"inner": ["deeper"], "deeper": ["e"]}
    message = nested_cycle("e", plan, lambda name: inner_steps.get(name, []))
    assert "step 0 (model 'inner') leads back to 'e' (e -> inner -> deeper -> e)" in message
    assert nested_cycle("e", plan, lambda name: {"inner": ["x"], "x": ["inner"]}.get(name, [])) == ""


def test_conch_validate_reports_the_ensembles_own_problems_and_no_missing_model_file(tmp_path: Path) -> None:
    write_ensemble(tmp_path, "sound", ensemble_config("sound", [X], [Y], DIAMOND))
    assert validate_model(tmp_path / "sound") == []
    ring = [("a", {"I": "X", "J": "B_OUT"}, {"O": "A_OUT"}), ("b", {"I": "A_OUT"}, {"O": "B_OUT", "O2": "Y"})]
    write_ensemble(tmp_path, "ring", ensemble_config("ring", [X], [Y], ring))
    [finding] = validate_model(tmp_path / "ring")
    assert (finding.code, finding.model, finding.field) == ("ensemble-invalid", "ring", "ensemble_scheduling")
    assert "form a cycle" in finding.message
