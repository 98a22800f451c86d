"""The supervisor of ``conch serve``'s processes: exits noticed as they happen, every child stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import uvloop

from conch.runtime.children import Children


def spawn(script: str) -> int:
    return os.posix_spawn("/bin/sh", ["sh", "-c", script], os.environ, setsid=True)


def test_a_child_s_exit_is_reported_with_its_status_as_it_happens() -> None:
    seen: list[tuple[int, int]] = []

    async def scenario() -> tuple[float, Children, int, int]:
        children = Children("test process", lambda pid, code: seen.append((pid, code)))
        lasting, failing = spawn("sleep 30"), spawn("sleep 0.2; exit 3")
        children.adopt(lasting)
        children.adopt(failing)
        started = time.monotonic()
        await asyncio.wait_for(children.exited.wait(), 10)
        noticed = time.monotonic() - started
        assert children.running == [lasting]
        await children.stop(signal.SIGTERM, 10)
        return noticed, children, lasting, failing

    noticed, children, lasting, failing = uvloop.run(scenario())
    assert noticed < 2.0  # no polling period: the pidfd wakes the loop
    assert seen[0] == (failing, 3)
    assert children.codes == {failing: 3, lasting: -signal.SIGTERM}
    assert children.running == []


def test_a_child_that_ignores_the_signal_is_killed_after_the_timeout() -> None:
    async def scenario() -> tuple[Children, int, float]:
        children = Children("test process")
        stubborn = spawn("trap '' TERM; while :; do sleep 0.1; done")
        children.adopt(stubborn)
        await asyncio.sleep(0.3)  # the shell has set its trap
        started = time.monotonic()
        await children.stop(signal.SIGTERM, 0.5)
        return children, stubborn, time.monotonic() - started

    children, stubborn, took = uvloop.run(scenario())
    assert children.codes == {stubborn: -signal.SIGKILL}
    assert 0.5 <= took < 5.0


def test_stopping_children_already_told_waits_without_a_signal() -> None:
    async def scenario() -> Children:
        children = Children("test process")
        children.adopt(spawn("sleep 0.3; exit 0"))
        await children.stop(None, 10)
        return children

    children = uvloop.run(scenario())
    assert list(children.codes.values()) == [0]
