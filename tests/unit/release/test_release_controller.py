"""The release controller on a fake clock: stepping, the failure threshold, step timeouts and
``on_inconclusive``, pauses and resumes. A step never advances while its checks fail.

The controller is driven as the server drives it: answers and comparisons reported as the router and
the shadow runner report them, then :meth:`ReleaseController.check` once a simulated second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conch.core.errors import InvalidArgumentError
from conch.release.compare import Comparison
from conch.release.controller import ReleaseController
from conch.release.spec import spec_from_dict
from conch.release.state import ReleaseState
from tests.fixtures.release_fakes import Clock, FakeRepository, FakeVersion

MODEL = "scored"


class Traffic:
    """Answers of both versions and comparisons, a simulated second at a time, then one check."""

    def __init__(self, controller: ReleaseController, clock: Clock) -> None:
        self.controller, self.clock = controller, clock
        self.rng = np.random.default_rng(7)

    def second(self, agreement: float = 1.0, slowdown: float = 1.0, answers: int = 120) -> None:
        for version, slower in ((1, 1.0), (2, slowdown)):
            for latency in self.rng.lognormal(np.log(0.001), 0.2, answers):
                self.controller.record_answer(MODEL, version, float(latency) * slower, False)
        for agreed in self.rng.random(answers) < agreement:
            self.controller.record_comparison(MODEL, Comparison(bool(agreed), 0.0 if agreed else 0.9))
        self.clock.now += 1.0
        self.controller.check()

    def run(self, seconds: int, **figures: Any) -> None:
        for _ in range(seconds):
            self.second(**figures)


def release(
    tmp_path: Path, gate: dict[str, Any] | None = None, **top: Any
) -> tuple[ReleaseController, Traffic]:
    clock = Clock()
    repository = FakeRepository(tmp_path, MODEL, top.pop("candidate_loaded", True))
    controller = ReleaseController(repository, None, clock=clock)  # type: ignore[arg-type]
    steps = top.pop(
        "steps", [{"weight": 10, "duration": "20s"}, {"weight": 50, "duration": "20s"}, {"weight": 100}]
    )
    spec = {"candidate": 2, "baseline": 1, "steps": steps, "gate": gate or {}, **top}
    controller.start(MODEL, spec_from_dict(spec))
    return controller, Traffic(controller, clock)


def state(controller: ReleaseController) -> tuple[str, int | None]:
    held = controller.releases[MODEL].release
    return held.state.value, held.step


def test_a_healthy_candidate_steps_at_each_duration_then_is_promoted(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path)
    assert state(controller) == ("progressing", 1)
    assert controller.split(MODEL) == (1, 2, 10)
    traffic.run(19)
    assert state(controller) == ("progressing", 1), "a step never ends before its duration"
    traffic.run(1)
    assert state(controller) == ("progressing", 2)
    assert controller.split(MODEL) == (1, 2, 50)
    traffic.run(20)
    assert state(controller) == ("progressing", 3)
    traffic.second()
    assert state(controller) == ("promoted", 3), "a step at 100 ends on its duration alone"
    events = [event.event for event in controller.releases[MODEL].release.history]
    assert events == ["created", "started", "advanced", "advanced", "promoted"]


def test_a_step_never_advances_while_a_check_fails(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path, {"failure_threshold": 10_000})
    traffic.run(60, agreement=0.5)
    assert state(controller) == ("progressing", 1), "three durations later, still step 1"
    judgement = controller.releases[MODEL].last_judgement
    assert judgement is not None and [c.name for c in judgement.failures] == ["agreement", "drift_fraction"]
    # Once the candidate agrees again in a fresh step run, the step may end.
    controller.act(MODEL, "pause")
    controller.act(MODEL, "resume")
    traffic.run(20)
    assert state(controller) == ("progressing", 2)


@pytest.mark.parametrize("threshold", [1, 3])
def test_on_failure_applies_at_exactly_failure_threshold_failed_checks(
    tmp_path: Path, threshold: int
) -> None:
    controller, traffic = release(tmp_path, {"failure_threshold": threshold})
    for _ in range(threshold - 1):
        traffic.second(agreement=0.5)
        assert state(controller) == ("progressing", 1)
    traffic.second(agreement=0.5)
    assert state(controller) == ("rolled_back", 1)
    assert controller.split(MODEL) == (1, 2, 0)
    reason = controller.releases[MODEL].release.history[-1].reason
    assert reason.startswith("gate: agreement 0.") and "(limit 0.98): failed" in reason


def test_a_passing_check_between_failures_starts_the_count_again(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path, {"failure_threshold": 2})
    held = controller.releases[MODEL]
    traffic.second(agreement=0.5)
    assert held.tracker.consecutive_failures == 1
    held.figures.reset()  # a fresh step's figures: the next judgement has nothing failing
    traffic.second()
    assert held.tracker.consecutive_failures == 0
    assert state(controller) == ("progressing", 1)


def test_on_failure_pause_holds_the_step_and_its_weights(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path, on_failure="pause")
    traffic.run(2, agreement=0.5)
    assert state(controller) == ("paused", 1)
    traffic.run(30, agreement=0.5)
    assert state(controller) == ("paused", 1), "a paused release is not judged and does not move"
    assert controller.split(MODEL) == (1, 2, 10)


def test_a_slower_candidate_is_rolled_back_on_latency(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path)
    traffic.run(12, slowdown=2.0)
    assert state(controller) == ("progressing", 1), "slower, but not yet for the hold time"
    traffic.run(12, slowdown=2.0)
    assert state(controller) == ("rolled_back", 1)
    assert "p95_increase" in controller.releases[MODEL].release.history[-1].reason


def test_a_slow_moment_as_a_step_begins_is_not_timed(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path)
    while state(controller) == ("progressing", 1):  # until step 2: the candidate's 10% becomes 50%
        traffic.second()
    assert state(controller) == ("progressing", 2)
    figures = controller.releases[MODEL].figures
    traffic.run(3, slowdown=3.0)  # the switch's first seconds: the candidate queues
    assert not figures.timing and figures.snapshot().candidate.p95_s is None
    traffic.run(4)
    assert figures.timing, "timed from 5 s into the step on"
    traffic.run(30)
    assert state(controller) == ("promoted", 3)


@pytest.mark.parametrize(
    ("on_inconclusive", "expected"),
    [("pause", ("paused", 1)), ("rollback", ("rolled_back", 1)), ("advance", ("progressing", 2))],
)
def test_a_step_that_times_out_inconclusive_applies_on_inconclusive(
    tmp_path: Path, on_inconclusive: str, expected: tuple[str, int]
) -> None:
    controller, traffic = release(tmp_path, {"on_inconclusive": on_inconclusive})
    # 99% agreement against a 98% limit: 800 comparisons cannot settle it (about 2,000 would).
    traffic.run(20, agreement=0.99, answers=40)
    assert state(controller) == expected
    if on_inconclusive != "advance":
        reason = controller.releases[MODEL].release.history[-1].reason
        assert reason.startswith("gate inconclusive at the end of step 1: agreement 0.9")
        assert "(limit 0.98): pending, 800 compared, bound straddles 0.98" in reason
        status = controller.status(MODEL)
        assert status["gate"]["on_inconclusive"] == on_inconclusive


def test_pause_and_resume_by_hand_restart_the_step_on_fresh_traffic(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path)
    traffic.run(10)
    controller.act(MODEL, "pause")
    traffic.run(30)
    assert state(controller) == ("paused", 1), "paused past the step's duration, still at step 1"
    controller.act(MODEL, "resume")
    held = controller.releases[MODEL]
    assert held.figures.snapshot().compared == 0, "the resumed step is judged on traffic after it"
    traffic.run(19)
    assert state(controller) == ("progressing", 1), "the resumed step runs its whole duration again"
    traffic.run(1)
    assert state(controller) == ("progressing", 2)


def test_a_pause_step_waits_for_promote_and_refuses_resume(tmp_path: Path) -> None:
    steps = [{"weight": 10, "duration": "20s"}, {"pause": True}, {"weight": 100}]
    controller, traffic = release(tmp_path, steps=steps)
    traffic.run(20)
    assert state(controller) == ("paused", 2)
    traffic.run(60)
    assert state(controller) == ("paused", 2)
    with pytest.raises(InvalidArgumentError, match="pause step"):
        controller.act(MODEL, "resume")
    controller.act(MODEL, "promote")
    assert state(controller) == ("progressing", 3)


def test_a_pending_release_starts_when_its_candidate_is_ready_or_fails_with_it(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path / "a", candidate_loaded=False)
    repository: Any = controller.repository
    assert state(controller) == ("pending", None)
    traffic.clock.now += 5
    controller.check()
    assert state(controller) == ("pending", None)
    assert controller.split(MODEL) == (1, 2, 0)
    repository.models[MODEL].versions[2] = FakeVersion(2)
    controller.versions_loaded(MODEL)
    assert state(controller) == ("progressing", 1)

    failing, _ = release(tmp_path / "b", candidate_loaded=False)
    broken: Any = failing.repository
    broken.models[MODEL].versions[2] = FakeVersion(2, ready=False)
    broken.models[MODEL].versions[2].reason = "model.onnx is not a valid ONNX file"
    failing.check()
    assert failing.releases[MODEL].release.state is ReleaseState.FAILED


def test_the_status_says_which_min_agreement_it_used_and_why_a_check_waits(tmp_path: Path) -> None:
    controller, traffic = release(tmp_path)
    traffic.second()
    gate = controller.status(MODEL)["gate"]
    assert gate["min_agreement_source"] == "default 0.98 (no expected agreement recorded)"
    agreement = next(check for check in gate["checks"] if check["name"] == "agreement")
    assert agreement["outcome"] == "pending" and agreement["detail"].startswith("120 compared")
    assert agreement["lower"] < 0.98 < agreement["upper"] + 1e-9
