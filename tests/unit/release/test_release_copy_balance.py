"""Shadow copies kept even between the versions while both answer clients
(:mod:`conch.release.copy_balance`), through the controller as the router asks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conch.release.controller import ReleaseController
from conch.release.copy_balance import COPY_SLACK, CopyBalance
from conch.release.spec import spec_from_dict
from tests.fixtures.release_fakes import Clock, FakeRepository

MODEL = "scored"


def test_a_version_is_sent_at_most_the_slack_beyond_what_it_sends() -> None:
    balance = CopyBalance()
    assert all(balance.allow(1, answered=1, target=2) for _ in range(COPY_SLACK))
    assert not balance.allow(1, answered=1, target=2)
    assert balance.allow(1, answered=2, target=1)  # a copy the other way
    assert balance.allow(1, answered=1, target=2)  # makes room for one more
    assert not balance.allow(1, answered=1, target=2)
    assert balance.allow(2, answered=1, target=2), "a new step starts even"


def controller_at(tmp_path: Path, step: dict[str, Any]) -> ReleaseController:
    controller = ReleaseController(FakeRepository(tmp_path, MODEL, True), None, clock=Clock())  # type: ignore[arg-type]
    spec = {"candidate": 2, "baseline": 1, "steps": [step, {"weight": 100}]}
    controller.start(MODEL, spec_from_dict(spec))
    return controller


def copies_to(controller: ReleaseController, answered: int, count: int) -> list[int | None]:
    return [controller.shadow_version(MODEL, answered) for _ in range(count)]


def test_while_both_answer_clients_in_a_shadow_step_the_copies_stay_even(tmp_path: Path) -> None:
    controller = controller_at(tmp_path, {"weight": 50, "duration": "1m", "shadow": True})
    assert copies_to(controller, 1, COPY_SLACK + 5) == [2] * COPY_SLACK + [None] * 5
    assert copies_to(controller, 2, 3) == [1, 1, 1]
    assert copies_to(controller, 1, 4) == [2, 2, 2, None]


def test_a_dark_launch_and_a_canary_copy_every_answer_one_way(tmp_path: Path) -> None:
    dark = controller_at(tmp_path / "dark", {"weight": 0, "duration": "1m", "shadow": True})
    assert copies_to(dark, 1, 3 * COPY_SLACK) == [2] * 3 * COPY_SLACK
    canary = controller_at(tmp_path / "canary", {"weight": 10, "duration": "1m"})
    assert copies_to(canary, 2, 3 * COPY_SLACK) == [1] * 3 * COPY_SLACK
    assert copies_to(canary, 1, 3) == [None] * 3
