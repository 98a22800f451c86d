"""The release runner's checks tell the scheduling which models take turns: the versions of a model
whose release is under way share one line, and run each on its own again once it ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conch.lifecycle.release_runner import RELEASE_CHECK_SECS, check_releases
from conch.release.controller import ReleaseController
from conch.release.spec import spec_from_dict
from conch.scheduling.shared_turns import share_turns, turns_of
from tests.fixtures.release_fakes import Clock, FakeRepository

MODEL = "scored"


def checked_a_while(controller: ReleaseController) -> None:
    async def main() -> None:
        checks = asyncio.ensure_future(check_releases(controller))
        await asyncio.sleep(1.5 * RELEASE_CHECK_SECS)  # one round of checks
        checks.cancel()

    asyncio.run(main())


def test_a_release_sending_clients_to_both_shares_turns_and_an_ended_one_stops(tmp_path: Path) -> None:
    share_turns(set())
    controller = ReleaseController(FakeRepository(tmp_path, MODEL, True), None, clock=Clock())  # type: ignore[arg-type]
    checked_a_while(controller)
    assert turns_of(MODEL) is None
    steps = [{"weight": 10, "duration": "1m"}, {"weight": 100}]
    controller.start(MODEL, spec_from_dict({"candidate": 2, "baseline": 1, "steps": steps}))
    checked_a_while(controller)
    assert turns_of(MODEL) is not None
    controller.act(MODEL, "rollback", "a person rolled it back")
    checked_a_while(controller)
    assert turns_of(MODEL) is None


def test_a_dark_launch_leaves_the_baseline_s_clients_their_own_turns(tmp_path: Path) -> None:
    share_turns(set())
    controller = ReleaseController(FakeRepository(tmp_path, MODEL, True), None, clock=Clock())  # type: ignore[arg-type]
    steps = [{"weight": 0, "duration": "1m", "shadow": True}, {"weight": 100}]
    controller.start(MODEL, spec_from_dict({"candidate": 2, "baseline": 1, "steps": steps}))
    checked_a_while(controller)
    assert controller.releases[MODEL].release.state.value == "progressing"
    assert turns_of(MODEL) is None
