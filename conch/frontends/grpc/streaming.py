"""``ModelStreamInfer``'s concurrency, shared by the in-process servicer and the calls frontend
processes relay to the model process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

Request = TypeVar("Request")
Reply = TypeVar("Reply")


async def answer_concurrently(
    requests: AsyncIterator[Request], answer: Callable[[Request], AsyncIterator[Reply]]
) -> AsyncIterator[Reply]:
    """Start ``answer`` for each request as it arrives and yield the replies as they come.

    Why: a stream's requests are independent (as in Triton), so a slow one must not hold back the
    others, and the dynamic batcher can batch requests that share a stream. ``answer`` yields one
    reply per request, or any number for a decoupled model. It must not raise: a failed request's
    reply is an error message on the stream.
    """
    replies: asyncio.Queue[Reply | None] = asyncio.Queue()
    pending: set[asyncio.Task[None]] = set()

    async def answer_one(request: Request) -> None:
        async for reply in answer(request):
            await replies.put(reply)

    async def read_all() -> None:
        async for request in requests:
            task = asyncio.create_task(answer_one(request))
            pending.add(task)
            task.add_done_callback(pending.discard)
        while pending:
            await asyncio.gather(*list(pending))
        await replies.put(None)

    reader = asyncio.create_task(read_all())
    try:
        while (reply := await replies.get()) is not None:
            yield reply
    finally:
        reader.cancel()


def one_reply(answer: Callable[[Request], Awaitable[Reply]]) -> Callable[[Request], AsyncIterator[Reply]]:
    """An answer of exactly one reply, in the shape :func:`answer_concurrently` takes."""

    async def replies(request: Request) -> AsyncIterator[Reply]:
        yield await answer(request)

    return replies
