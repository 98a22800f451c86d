"""``ReadinessCall``: at most one ``is_ready`` call in flight per model process, a timeout that means
not ready, and an answer for the callers that waited when the process dies."""

from __future__ import annotations

import asyncio
from typing import Any

from conch.backends.python.readiness import ReadinessCall


def test_callers_share_the_call_in_flight_and_its_answer() -> None:
    async def scenario() -> tuple[list[tuple[bool, str]], int]:
        call, sent = ReadinessCall(), []
        waiting = [asyncio.ensure_future(call.ask(sent.append)) for _ in range(5)]
        await asyncio.sleep(0)
        call.answered({"op": "readiness", "ready": True})
        return list(await asyncio.gather(*waiting)), len(sent)

    answers, sent = asyncio.run(scenario())
    assert answers == [(True, "")] * 5 and sent == 1


def test_no_answer_in_time_is_not_ready_and_a_stuck_call_is_not_repeated() -> None:
    async def scenario() -> tuple[tuple[bool, str], tuple[bool, str], int]:
        call, sent = ReadinessCall(), []
        first = await call.ask(sent.append, timeout_s=0.01)
        second = await call.ask(sent.append, timeout_s=0.01)  # the first call still has no answer
        return first, second, len(sent)

    first, second, sent = asyncio.run(scenario())
    assert first[0] is False and "did not answer within 0.01 s" in first[1]
    assert second[0] is False and sent == 1


def test_an_error_or_a_death_is_not_ready_with_its_reason() -> None:
    async def scenario(settle: Any) -> tuple[bool, str]:
        call = ReadinessCall()
        waiting = asyncio.ensure_future(call.ask(lambda message: None))
        await asyncio.sleep(0)
        settle(call)
        return await waiting

    raised = asyncio.run(scenario(lambda c: c.answered({"ready": False, "error": "its is_ready() raised X"})))
    assert raised == (False, "its is_ready() raised X")
    assert asyncio.run(scenario(lambda c: c.fail("the process died"))) == (False, "the process died")
    assert asyncio.run(scenario(lambda c: c.answered({"ready": False}))) == (False, "")
