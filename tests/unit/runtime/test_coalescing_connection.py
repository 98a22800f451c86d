"""The frontend link's socket (``conch.runtime.coalescing``): a turn's messages leave in one write.

Two real sockets of a socketpair on a real event loop: what one side sends in a turn of the loop
arrives at the other as one frame, in order, and each message reaches ``on_message`` by itself.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from conch.backends.python.stub import conch_frames
from conch.runtime.coalescing import CoalescingConnection


def test_a_turns_messages_go_in_one_frame_and_arrive_in_order() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], bytes]:
        left, right = socket.socketpair()
        received: list[dict[str, Any]] = []
        sender = CoalescingConnection(left, lambda m: None, lambda: None)
        reader = CoalescingConnection(right, received.append, lambda: None)
        sender.attach()
        for n in range(5):
            sender.send({"op": "answer", "id": n})
        await asyncio.sleep(0)  # the turn ends: the five leave together
        raw = right.recv(1 << 16, socket.MSG_PEEK)
        reader.attach()
        for _ in range(100):
            if len(received) == 5:
                break
            await asyncio.sleep(0.01)
        sender.detach()
        reader.detach()
        left.close()
        right.close()
        return received, raw

    received, raw = asyncio.run(scenario())
    assert received == [{"op": "answer", "id": n} for n in range(5)]
    assert raw == conch_frames.encode_frame([{"op": "answer", "id": n} for n in range(5)])


def test_nothing_is_sent_after_detach() -> None:
    async def scenario() -> bytes:
        left, right = socket.socketpair()
        sender = CoalescingConnection(left, lambda m: None, lambda: None)
        sender.attach()
        sender.send({"op": "late"})
        sender.detach()
        await asyncio.sleep(0.01)
        right.setblocking(False)
        try:
            return right.recv(1 << 16)
        except BlockingIOError:
            return b""
        finally:
            left.close()
            right.close()

    assert asyncio.run(scenario()) == b""
