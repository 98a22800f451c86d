"""The release state machine on a clock the test controls, and its state dir across a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conch.core.errors import InvalidArgumentError
from conch.release.spec import spec_from_yaml
from conch.release.state import Release, ReleaseEvent, ReleaseState
from conch.release.store import ReleaseStore

PENDING, PROGRESSING, PAUSED = ReleaseState.PENDING, ReleaseState.PROGRESSING, ReleaseState.PAUSED
PROMOTED, ROLLED_BACK, FAILED = ReleaseState.PROMOTED, ReleaseState.ROLLED_BACK, ReleaseState.FAILED

T0 = 1_700_000_000.0  # the fake wall clock's start

ISSUE_STEPS = """\
candidate: 2
baseline: 1
steps:
  - {weight: 5,   duration: 10m}
  - {weight: 50,  duration: 30m, shadow: true}
  - {pause: true}
  - {weight: 100}
"""


def release(text: str = ISSUE_STEPS, **create: int) -> Release:
    return Release.create(spec_from_yaml(text), T0, **create)


def started(text: str = ISSUE_STEPS) -> Release:
    ongoing = release(text)
    ongoing.versions_ready(T0)
    return ongoing


def test_a_release_walks_its_steps_waits_at_the_pause_step_and_is_promoted() -> None:
    ongoing = release()
    assert (ongoing.state, ongoing.step, ongoing.weights(), ongoing.shadow) == (
        PENDING,
        None,
        {1: 100, 2: 0},
        False,
    )

    event = ongoing.versions_ready(T0 + 5)
    assert (event.event, event.state, event.step, event.at) == ("started", PROGRESSING, 1, T0 + 5)
    assert (ongoing.weights(), ongoing.shadow, ongoing.step_started_at) == ({1: 95, 2: 5}, False, T0 + 5)

    assert ongoing.advance_if_due(T0 + 5 + 599) is None  # a second short of 10m
    assert ongoing.step == 1
    event = ongoing.advance_if_due(T0 + 5 + 600)
    assert event is not None and (event.event, event.step) == ("advanced", 2)
    assert (ongoing.weights(), ongoing.shadow, ongoing.step_started_at) == ({1: 50, 2: 50}, True, T0 + 605)

    event = ongoing.advance_if_due(T0 + 605 + 1800)
    assert event is not None and (event.state, event.step) == (PAUSED, 3)
    assert "pause step: waiting for promote" in event.reason
    # The pause step holds the previous step's traffic, shadow included, for as long as it takes.
    assert (ongoing.weights(), ongoing.shadow) == ({1: 50, 2: 50}, True)
    assert ongoing.advance_if_due(T0 + 10 * 86_400) is None
    assert ongoing.state is PAUSED

    event = ongoing.promote(T0 + 3000)
    assert (event.state, event.step, ongoing.weights(), ongoing.shadow) == (
        PROGRESSING,
        4,
        {1: 0, 2: 100},
        False,
    )
    event = ongoing.advance_if_due(T0 + 3000)  # the last step has no duration: done at the next check
    assert event is not None and (event.event, event.state) == ("promoted", PROMOTED)
    assert (ongoing.weights(), ongoing.shadow, ongoing.state.active) == ({1: 0, 2: 100}, False, False)
    assert ongoing.advance_if_due(T0 + 4000) is None

    assert [(e.event, e.state, e.step) for e in ongoing.history] == [
        ("created", PENDING, None),
        ("started", PROGRESSING, 1),
        ("advanced", PROGRESSING, 2),
        ("advanced", PAUSED, 3),
        ("advanced", PROGRESSING, 4),
        ("promoted", PROMOTED, 4),
    ]
    assert [e.at for e in ongoing.history] == [T0, T0 + 5, T0 + 605, T0 + 2405, T0 + 3000, T0 + 3000]
    assert ongoing.history[1].reason == "versions 1 and 2 are READY; step 1 of 4: weight 5 for 10m"
    assert ongoing.history[2].reason == "step 1 done after 10m; step 2 of 4: weight 50, shadow for 30m"
    assert ongoing.history[5].reason == "step 4 done; version 2 serves 100%"


def test_each_transition_is_returned_and_appended_to_the_history() -> None:
    ongoing = release()
    returned = [ongoing.versions_ready(T0), ongoing.pause(T0 + 1), ongoing.resume(T0 + 2)]
    assert ongoing.history[1:] == returned
    assert all(isinstance(event, ReleaseEvent) for event in returned)
    assert returned[1].to_json() == {
        "time": T0 + 1,
        "event": "paused",
        "reason": "paused by hand",
        "state": "paused",
        "step": 1,
    }


def test_the_baseline_defaults_to_the_serving_version() -> None:
    text = "candidate: 3\nsteps: [{weight: 20}]\n"
    assert release(text, serving=2).weights() == {2: 100, 3: 0}
    with pytest.raises(InvalidArgumentError, match="no baseline is named and no version serves"):
        release(text)
    with pytest.raises(
        InvalidArgumentError, match="defaults to version 3, the one serving now, which is the candidate"
    ):
        release(text, serving=3)
    assert release(ISSUE_STEPS, serving=7).baseline == 1  # a named baseline wins


@pytest.mark.parametrize(
    ("on_failure", "state", "event", "weights"),
    [
        ("rollback", ROLLED_BACK, "rolled_back", {1: 100, 2: 0}),
        ("pause", PAUSED, "paused", {1: 95, 2: 5}),
    ],
)
def test_a_gate_failure_applies_on_failure(
    on_failure: str, state: ReleaseState, event: str, weights: dict[int, int]
) -> None:
    ongoing = started(ISSUE_STEPS + f"on_failure: {on_failure}\n")
    happened = ongoing.on_gate_failure(T0 + 60, "agreement 0.97 below min_agreement 0.995")
    assert (happened.event, happened.state, happened.step) == (event, state, 1)
    assert happened.reason == "gate: agreement 0.97 below min_agreement 0.995"
    assert (ongoing.state, ongoing.weights()) == (state, weights)
    assert ongoing.advance_if_due(T0 + 10_000) is None  # neither moves on by itself


def test_resume_after_a_gate_pause_runs_the_step_again_from_now() -> None:
    ongoing = started(ISSUE_STEPS + "on_failure: pause\n")
    ongoing.on_gate_failure(T0 + 500, "p95 up 40%")
    ongoing.resume(T0 + 900)
    assert (ongoing.state, ongoing.step, ongoing.step_started_at) == (PROGRESSING, 1, T0 + 900)
    assert ongoing.advance_if_due(T0 + 900 + 599) is None  # the full 10m again, judged on new traffic
    assert ongoing.advance_if_due(T0 + 900 + 600) is not None
    assert ongoing.step == 2


def test_promote_approves_the_current_step() -> None:
    ongoing = started()
    event = ongoing.promote(T0 + 30, "looks fine")
    assert (event.event, event.reason, ongoing.step) == (
        "advanced",
        "looks fine; step 2 of 4: weight 50, shadow for 30m",
        2,
    )
    ongoing.pause(T0 + 40)
    ongoing.promote(T0 + 50)  # a paused step approved as it stands
    assert (ongoing.state, ongoing.step) == (PAUSED, 3)  # the next one is the pause step


def test_rollback_and_fail_send_the_candidate_to_zero() -> None:
    for ongoing in (started(), release()):
        event = ongoing.rollback(T0 + 9)
        assert (event.event, event.reason, ongoing.weights()) == (
            "rolled_back",
            "rolled back by hand",
            {1: 100, 2: 0},
        )
    failing = release()
    event = failing.fail(T0 + 9, "version 2 failed to load: bad graph")
    assert (event.state, event.step, failing.weights(), failing.shadow) == (
        FAILED,
        None,
        {1: 100, 2: 0},
        False,
    )


@pytest.mark.parametrize(
    ("setup", "action", "words"),
    [
        ("pending", "promote", "cannot promote: the release of version 2 is pending; nothing to promote"),
        ("promoted", "promote", "is promoted at step 4; nothing to promote"),
        ("rolled_back", "promote", "is rolled_back at step 1; nothing to promote"),
        ("progressing", "resume", "is progressing at step 1; only a paused release can be resumed"),
        ("pause_step", "resume", "step 3 is a pause step: it waits for 'promote'"),
        ("paused", "pause", "is paused at step 1; only a progressing release can be paused"),
        ("pending", "pause", "cannot pause: the release of version 2 is pending"),
        ("progressing", "versions_ready", "only a pending release waits for its versions"),
        ("promoted", "rollback", "is promoted at step 4; nothing to roll back"),
        ("rolled_back", "fail", "is rolled_back at step 1; it has already ended"),
        ("paused", "on_gate_failure", "the gate judges only a progressing release"),
        ("pending", "on_gate_failure", "the gate judges only a progressing release"),
    ],
)
def test_invalid_actions_are_refused_and_change_nothing(setup: str, action: str, words: str) -> None:
    ongoing = release()
    if setup != "pending":
        ongoing.versions_ready(T0)
    if setup == "paused":
        ongoing.pause(T0)
    elif setup == "pause_step":
        ongoing.promote(T0)
        ongoing.promote(T0)
    elif setup == "promoted":
        for _ in range(4):
            ongoing.promote(T0)
    elif setup == "rolled_back":
        ongoing.rollback(T0)
    before = (ongoing.state, ongoing.step, ongoing.weights(), len(ongoing.history))
    calls = {
        "promote": lambda: ongoing.promote(T0 + 1),
        "resume": lambda: ongoing.resume(T0 + 1),
        "pause": lambda: ongoing.pause(T0 + 1),
        "rollback": lambda: ongoing.rollback(T0 + 1),
        "fail": lambda: ongoing.fail(T0 + 1, "x"),
        "versions_ready": lambda: ongoing.versions_ready(T0 + 1),
        "on_gate_failure": lambda: ongoing.on_gate_failure(T0 + 1, "x"),
    }
    with pytest.raises(InvalidArgumentError) as caught:
        calls[action]()
    assert words in caught.value.message
    assert caught.value.kind.http_status == 400
    assert (ongoing.state, ongoing.step, ongoing.weights(), len(ongoing.history)) == before


def test_a_first_pause_step_waits_before_any_traffic_moves() -> None:
    ongoing = started("candidate: 2\nbaseline: 1\nsteps: [{pause: true}, {weight: 10, duration: 1m}]\n")
    assert (ongoing.state, ongoing.step, ongoing.weights(), ongoing.shadow) == (
        PAUSED,
        1,
        {1: 100, 2: 0},
        False,
    )


def test_a_zero_weight_shadow_step_shadows_without_moving_traffic() -> None:
    ongoing = started(
        "candidate: 2\nbaseline: 1\nsteps: [{weight: 0, duration: 1m, shadow: true}, {weight: 20}]\n"
    )
    assert (ongoing.weights(), ongoing.shadow) == ({1: 100, 2: 0}, True)


def test_a_saved_release_resumes_in_the_middle_of_its_step(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "state")
    ongoing = started()
    ongoing.advance_if_due(T0 + 600)  # step 2: 50% shadowed for 30m, from T0 + 600
    store.save("iris", ongoing, T0 + 600 + 700)  # 700s into step 2

    restarted_at = T0 + 50_000.0  # the server was down for hours: that time does not count
    back = store.load("iris", restarted_at)
    assert back is not None
    assert (back.state, back.step, back.weights(), back.shadow, back.baseline) == (
        PROGRESSING,
        2,
        {1: 50, 2: 50},
        True,
        1,
    )
    assert back.spec == ongoing.spec
    assert back.history == ongoing.history
    assert back.step_elapsed_s(restarted_at) == 700
    assert back.advance_if_due(restarted_at + 1099) is None  # 1100s were left of the 1800s
    event = back.advance_if_due(restarted_at + 1100)
    assert event is not None and (back.state, back.step) == (PAUSED, 3)


def test_save_and_load_keep_every_state(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path)
    cases = {"pending": release(), "paused": started(), "rolled": started()}
    cases["paused"].pause(T0 + 3)
    cases["rolled"].rollback(T0 + 3, "bad outputs")
    for name, each in cases.items():
        store.save(name, each, T0 + 10)
        back = store.load(name, T0 + 99)
        assert back is not None
        assert back.to_json(T0 + 99) == each.to_json(T0 + 10)
    assert store.models() == ["paused", "pending", "rolled"]
    assert store.load("absent", T0) is None


def test_a_save_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path)
    ongoing = started()
    store.save("iris", ongoing, T0 + 1)
    ongoing.promote(T0 + 2)
    store.save("iris", ongoing, T0 + 3)
    assert os.listdir(tmp_path) == ["iris.release.json"]
    saved = json.loads((tmp_path / "iris.release.json").read_text())
    assert (saved["state"], saved["step"], saved["step_elapsed_s"]) == ("progressing", 2, 1.0)
    store.delete("iris")
    store.delete("iris")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("model", ["../iris", "a/b", "..", ".", "", "x..y", "a\\b"])
def test_a_model_name_that_could_leave_the_state_dir_is_refused(tmp_path: Path, model: str) -> None:
    store = ReleaseStore(tmp_path / "state")
    with pytest.raises(InvalidArgumentError, match="cannot name a state file"):
        store.save(model, started(), T0)
    with pytest.raises(InvalidArgumentError, match="cannot name a state file"):
        store.load(model, T0)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ('{"format": 1', "not valid JSON"),
        ('{"format": 9}', "not a release state of format 1"),
        ("STEP=7", "step 7 is not one of the spec's 4 steps"),
        ("STATE=sleeping", "'sleeping' is not a valid ReleaseState"),
        ("ELAPSED=-5", "step_elapsed_s -5 is not a number of seconds"),
        ("BASELINE=2", "baseline 2 is the candidate"),
    ],
)
def test_a_damaged_state_file_is_refused_by_name(tmp_path: Path, damage: str, words: str) -> None:
    store = ReleaseStore(tmp_path)
    store.save("iris", started(), T0)
    path = tmp_path / "iris.release.json"
    if "=" in damage:
        field, value = damage.split("=")
        data = json.loads(path.read_text())
        key = {"STEP": "step", "STATE": "state", "ELAPSED": "step_elapsed_s", "BASELINE": "baseline"}[field]
        data[key] = int(value) if value.lstrip("-").isdigit() else value
        path.write_text(json.dumps(data))
    else:
        path.write_text(damage)
    with pytest.raises(InvalidArgumentError) as caught:
        store.load("iris", T0)
    assert caught.value.message.startswith("release state iris.release.json: ")
    assert words in caught.value.message


def test_a_save_that_fails_midway_leaves_the_previous_state_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReleaseStore(tmp_path)
    ongoing = started()
    store.save("iris", ongoing, T0 + 1)
    before = (tmp_path / "iris.release.json").read_text()
    ongoing.promote(T0 + 2)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.save("iris", ongoing, T0 + 3)
    assert os.listdir(tmp_path) == ["iris.release.json"]
    assert (tmp_path / "iris.release.json").read_text() == before
