"""The release spec: release.yaml and a JSON body read through one path, every field, every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conch.core.errors import InvalidArgumentError
from conch.release.spec import (
    GateSpec,
    ReleaseSpec,
    Step,
    format_duration,
    parse_duration,
    spec_from_dict,
    spec_from_yaml,
    spec_to_json,
)

ISSUE_EXAMPLE = """\
candidate: 2              # version being released
baseline: 1               # default: the version serving unversioned traffic when the release starts
steps:                    # weights are the candidate's share of requests that name no version
  - {weight: 5,   duration: 10m}
  - {weight: 50,  duration: 30m, shadow: true}   # dual-read
  - {pause: true}                                # waits for `promote` (manual approval)
  - {weight: 100}
gate:
  judge: local
  prometheus_url: http://prometheus:9090
  min_requests: 200
  failure_threshold: 2
  compare: [probabilities]
  max_error_rate_increase: 0.01
  max_p95_increase: 0.20
  min_agreement: 0.995
  drift_threshold: 0.3
  max_drift_fraction: 0.01
on_failure: rollback
"""


def minimal(**fields: Any) -> dict[str, Any]:
    """A valid body with ``fields`` replacing its own."""
    return {"candidate": 2, "steps": [{"weight": 10, "duration": "1m"}], **fields}


def refused(data: object) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        spec_from_dict(data)
    assert caught.value.kind.http_status == 400
    return caught.value.message


def test_the_issue_example_gives_every_field() -> None:
    assert spec_from_yaml(ISSUE_EXAMPLE) == ReleaseSpec(
        candidate=2,
        baseline=1,
        steps=(
            Step(weight=5, duration_s=600.0),
            Step(weight=50, duration_s=1800.0, shadow=True),
            Step(weight=None, pause=True),
            Step(weight=100),
        ),
        gate=GateSpec(
            judge="local",
            prometheus_url="http://prometheus:9090",
            min_requests=200,
            failure_threshold=2,
            compare=("probabilities",),
            max_error_rate_increase=0.01,
            max_p95_increase=0.20,
            min_agreement=0.995,
            drift_threshold=0.3,
            max_drift_fraction=0.01,
        ),
        on_failure="rollback",
    )


def test_defaults_are_the_issue_figures() -> None:
    spec = spec_from_yaml("candidate: 3\nsteps: [{weight: 100}]\n")
    assert spec.baseline is None
    assert spec.on_failure == "rollback"
    assert spec.steps == (Step(weight=100, duration_s=None, shadow=False, pause=False),)
    assert spec.gate == GateSpec()
    gate = spec.gate
    assert (gate.judge, gate.prometheus_url, gate.compare) == ("local", None, None)
    assert (gate.min_requests, gate.failure_threshold) == (200, 2)
    assert (gate.max_error_rate_increase, gate.max_p95_increase) == (0.01, 0.20)
    # min_agreement is left to the release: the expected agreement recorded at export, else 0.98.
    assert (gate.min_agreement, gate.drift_threshold, gate.max_drift_fraction) == (None, 0.3, 0.02)
    assert gate.on_inconclusive == "pause"


def test_yaml_and_json_body_give_the_same_spec() -> None:
    body = json.loads(
        json.dumps(
            {
                "candidate": 2,
                "baseline": 1,
                "steps": [
                    {"weight": 5, "duration": "10m"},
                    {"weight": 50, "duration": "30m", "shadow": True},
                    {"pause": True},
                    {"weight": 100},
                ],
                "gate": {
                    "prometheus_url": "http://prometheus:9090",
                    "compare": ["probabilities"],
                    "max_p95_increase": 0.2,
                    "min_agreement": 0.995,
                    "max_drift_fraction": 0.01,
                },
                "on_failure": "rollback",
            }
        )
    )
    assert spec_from_dict(body) == spec_from_yaml(ISSUE_EXAMPLE)


def test_spec_to_json_reads_back_to_the_same_spec() -> None:
    spec = spec_from_yaml(ISSUE_EXAMPLE)
    data = spec_to_json(spec)
    assert data["steps"][0] == {"weight": 5, "duration": "10m", "shadow": False}
    assert data["steps"][2] == {"pause": True}
    assert data["gate"]["compare"] == ["probabilities"]
    assert spec_from_dict(json.loads(json.dumps(data))) == spec
    other = spec_from_yaml(
        "candidate: 7\nsteps: [{weight: 0, duration: 0.25s, shadow: true}, {weight: 30, duration: 1.5h}]\n"
        "gate: {judge: prometheus, prometheus_url: 'https://prom:9090'}\non_failure: pause\n"
    )
    assert spec_from_dict(spec_to_json(other)) == other
    assert spec_to_json(other)["baseline"] is None


def test_other_values_of_each_field() -> None:
    spec = spec_from_dict(
        minimal(
            baseline=4,
            on_failure="pause",
            gate={
                "judge": "prometheus",
                "prometheus_url": "http://prometheus:9090",
                "min_requests": 1,
                "failure_threshold": 5,
                "compare": ["label", "probabilities"],
                "max_error_rate_increase": 0,
                "max_p95_increase": 2,
                "min_agreement": 1,
                "drift_threshold": 2,
                "max_drift_fraction": 0.5,
            },
        )
    )
    assert (spec.candidate, spec.baseline, spec.on_failure) == (2, 4, "pause")
    assert spec.gate == GateSpec(
        "prometheus", "http://prometheus:9090", 1, 5, ("label", "probabilities"), 0, 2, 1, 2, 0.5
    )
    assert isinstance(spec.gate.max_p95_increase, float)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("0.5s", 0.5), ("2h", 7200.0)],
)
def test_durations_in_s_m_h(text: str, seconds: float) -> None:
    assert parse_duration(text, "d") == seconds
    assert parse_duration(format_duration(seconds), "d") == seconds


def test_durations_format_in_their_largest_whole_unit() -> None:
    assert [format_duration(s) for s in (600.0, 5400.0, 7200.0, 90.0, 0.5, 1e-05)] == [
        "10m",
        "90m",
        "2h",
        "90s",
        "0.5s",
        "0.00001s",
    ]


@pytest.mark.parametrize("bad", ["10 minutes", "10", 10, 1.5, "10ms", "10d", "-5m", "m", "", "1e3s", " 10m"])
def test_a_duration_without_a_known_unit_is_refused(bad: object) -> None:
    message = refused(minimal(steps=[{"weight": 5, "duration": bad}]))
    assert message.startswith("release.yaml: steps[0].duration must be a number with a unit s, m or h")
    assert repr(bad) in message


def test_ten_minutes_is_refused_from_yaml_with_the_field_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^release\.yaml: steps\[1\]\.duration .*'10 minutes'"):
        spec_from_yaml(
            "candidate: 2\nsteps:\n  - {weight: 5, duration: 10m}\n  - {weight: 9, duration: 10 minutes}\n"
        )


def test_a_zero_duration_is_refused() -> None:
    assert "steps[0].duration must be above 0" in refused(minimal(steps=[{"weight": 5, "duration": "0s"}]))


@pytest.mark.parametrize(
    ("weights", "field", "words"),
    [
        ([5, 5], "steps[1].weight (5)", "must be above steps[0].weight (5)"),
        ([50, 5], "steps[1].weight (5)", "must be above steps[0].weight (50)"),
        ([5, None, 3], "steps[2].weight (3)", "must be above steps[0].weight (5)"),
    ],
)
def test_weights_that_do_not_increase_are_refused(weights: list[int | None], field: str, words: str) -> None:
    steps = [{"pause": True} if weight is None else {"weight": weight} for weight in weights]
    assert refused(minimal(steps=steps)) == (
        f"release.yaml: {field} {words}: the candidate's share only grows during a release"
    )


@pytest.mark.parametrize("weight", [101, -1, 50.5, "50", True])
def test_a_weight_above_100_or_not_a_whole_percentage_is_refused(weight: object) -> None:
    assert refused(minimal(steps=[{"weight": 1}, {"weight": weight}])) == (
        f"release.yaml: steps[1].weight must be a whole percentage from 0 to 100, got {weight!r}"
    )


def test_a_step_without_weight_is_refused_unless_it_pauses() -> None:
    assert refused(minimal(steps=[{"duration": "1m"}])).startswith(
        "release.yaml: steps[0].weight is required"
    )
    assert spec_from_dict(minimal(steps=[{"pause": True}])).steps == (Step(weight=None, pause=True),)


def test_a_pause_step_takes_no_weight_duration_or_shadow() -> None:
    message = refused(minimal(steps=[{"pause": True, "weight": 5, "duration": "1m", "shadow": True}]))
    assert message.startswith("release.yaml: steps[0]: a pause step takes no 'weight', 'duration', 'shadow'")


@pytest.mark.parametrize("steps", [[], None, "5,50,100", {"weight": 5}])
def test_steps_must_be_a_non_empty_list(steps: object) -> None:
    assert refused(minimal(steps=steps)).startswith("release.yaml: steps must be a non-empty list of steps")


@pytest.mark.parametrize(("field", "value"), [("shadow", "yes please"), ("pause", 1)])
def test_step_flags_are_booleans(field: str, value: object) -> None:
    assert refused(minimal(steps=[{"weight": 5, field: value}])) == (
        f"release.yaml: steps[0].{field} must be true or false, got {value!r}"
    )


def test_unknown_keys_are_refused_with_the_likely_fix() -> None:
    assert refused(minimal(candiate=3)) == "release.yaml: unknown key 'candiate'; did you mean 'candidate'?"
    assert refused(minimal(steps=[{"wieght": 5}])) == (
        "release.yaml: steps[0]: unknown key 'wieght'; did you mean 'weight'?"
    )
    gate = refused(minimal(gate={"min_agrement": 0.99}))
    assert gate.startswith("release.yaml: gate: unknown key 'min_agrement'; did you mean 'min_agreement'")
    assert refused(minimal(gate={"colour": "blue"})) == "release.yaml: gate: unknown key 'colour'"


@pytest.mark.parametrize("version", ["2", 2.0, 0, -1, True, None, [2]])
def test_versions_are_whole_numbers_from_1(version: object) -> None:
    assert refused(minimal(candidate=version)) == (
        f"release.yaml: candidate must be a version number (a whole number from 1), got {version!r}"
    )
    if version is not None:
        assert refused(minimal(baseline=version)).startswith(
            "release.yaml: baseline must be a version number"
        )


def test_candidate_equal_to_baseline_is_refused() -> None:
    assert refused(minimal(candidate=2, baseline=2)).startswith(
        "release.yaml: baseline and candidate are both version 2"
    )


def test_required_fields() -> None:
    assert refused({"steps": [{"weight": 5}]}).startswith("release.yaml: 'candidate' is required")
    assert refused({"candidate": 2}).startswith("release.yaml: 'steps' is required")


@pytest.mark.parametrize("value", ["roll_back", "Rollback", None, True])
def test_on_failure_is_rollback_or_pause(value: object) -> None:
    assert refused(minimal(on_failure=value)) == (
        f"release.yaml: on_failure must be 'rollback' or 'pause', got {value!r}"
    )


@pytest.mark.parametrize(
    ("name", "value", "bounds"),
    [
        ("max_error_rate_increase", 1.5, "from 0 to 1"),
        ("max_error_rate_increase", -0.1, "from 0 to 1"),
        ("min_agreement", 1.01, "from 0 to 1"),
        ("min_agreement", "high", "from 0 to 1"),
        ("max_drift_fraction", float("nan"), "from 0 to 1"),
        ("drift_threshold", 2.5, "from 0 to 2"),
        ("max_p95_increase", -0.2, "from 0"),
        ("max_p95_increase", float("inf"), "from 0"),
        ("min_agreement", True, "from 0 to 1"),
    ],
)
def test_gate_limits_out_of_range_are_refused(name: str, value: object, bounds: str) -> None:
    assert refused(minimal(gate={name: value})) == (
        f"release.yaml: gate.{name} must be a number {bounds}, got {value!r}"
    )


@pytest.mark.parametrize("name", ["min_requests", "failure_threshold"])
@pytest.mark.parametrize("value", [0, -3, 2.5, "200", True])
def test_gate_counts_are_whole_numbers_from_1(name: str, value: object) -> None:
    assert refused(minimal(gate={name: value})) == (
        f"release.yaml: gate.{name} must be a whole number from 1, got {value!r}"
    )


def test_gate_judge_and_prometheus_url() -> None:
    assert refused(minimal(gate={"judge": "remote"})) == (
        "release.yaml: gate.judge must be 'local' or 'prometheus', got 'remote'"
    )
    assert refused(minimal(gate={"judge": "prometheus"})).startswith(
        "release.yaml: gate.prometheus_url is required with judge: prometheus"
    )
    assert refused(minimal(gate={"prometheus_url": "prometheus:9090"})) == (
        "release.yaml: gate.prometheus_url must be an http:// or https:// URL, got 'prometheus:9090'"
    )


@pytest.mark.parametrize("compare", [[], "probabilities", ["a", "a"], ["a", ""], [1]])
def test_gate_compare_is_a_list_of_distinct_output_names(compare: object) -> None:
    assert refused(minimal(gate={"compare": compare})).startswith(
        "release.yaml: gate.compare must be a non-empty list of distinct output names"
    )


@pytest.mark.parametrize("gate", [[1], "strict"])
def test_gate_must_be_a_mapping(gate: object) -> None:
    assert refused(minimal(gate=gate)).startswith("release.yaml: gate must be a mapping of judge, ")


def test_a_document_that_is_not_a_mapping_or_not_yaml_is_refused() -> None:
    for text in ("", "- 1\n- 2\n", "just words"):
        with pytest.raises(InvalidArgumentError, match=r"^release\.yaml must be a mapping of candidate, "):
            spec_from_yaml(text)
    with pytest.raises(InvalidArgumentError, match=r"^release\.yaml: not valid YAML at line 2, column \d+"):
        spec_from_yaml("candidate: 2\nsteps: [{weight: 5}]]\n")


def test_the_source_names_where_the_spec_came_from() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^request body: steps\[0\]\.weight must be"):
        spec_from_dict({"candidate": 2, "steps": [{"weight": 500}]}, "request body")
