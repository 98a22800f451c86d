"""The model window: records wait for room instead of retrying on their own, and it regrows."""

from __future__ import annotations

import asyncio

from conch.streams.window import ModelWindow


def test_a_refusal_shrinks_the_window_to_what_the_model_holds_and_answers_regrow_it() -> None:
    async def scenario() -> list[int]:
        window = ModelWindow(8)
        for _ in range(3):
            await window.enter()
        window.leave(refused=True)  # the model held 2 when it refused the third
        sizes = [window.size]
        waiting = asyncio.create_task(window.enter())
        await asyncio.sleep(0)
        assert not waiting.done(), "entered a full window"
        window.leave(refused=False)  # an answer: 1 inside, room for 3
        await asyncio.wait_for(waiting, 1)
        sizes += [window.size, window.inside]
        return sizes

    assert asyncio.run(scenario()) == [2, 3, 2]


def test_the_window_never_grows_past_its_limit_nor_shrinks_below_one() -> None:
    async def scenario() -> tuple[int, int]:
        window = ModelWindow(2)
        await window.enter()
        window.leave(refused=False)
        grown = window.size
        await window.enter()
        window.leave(refused=True)
        return grown, window.size

    assert asyncio.run(scenario()) == (2, 1)
