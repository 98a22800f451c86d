"""``CallAcceptors``: calls of one method accepted several at once, on a real ``grpc.aio`` server and
client over loopback, behave as the calls ``grpc.aio`` accepts itself (answers, aborts, deadlines,
codes and trailing metadata, shutdown), also when each is served in one task
(``conch.frontends.grpc.unary_call``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from conch.frontends.grpc import acceptors, unary_call
from conch.frontends.grpc.acceptors import CallAcceptors

ECHO = "/test.Echo/Echo"
OTHER = "/test.Echo/Other"
Handler = Callable[[bytes, Any], Awaitable[bytes]]


async def echo(request: bytes, context: Any) -> bytes:
    """Answers after a turn of the loop, so that concurrent calls overlap."""
    if request == b"tagged":
        context.set_trailing_metadata((("conch-request-id", "r-42"),))
    if request == b"coded":
        context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
        context.set_details("set without aborting")
    if request == b"refuse":
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused on purpose")
    if request == b"slow":
        await asyncio.sleep(1.0)
    if request == b"brief":
        await asyncio.sleep(0.3)
    if request == b"crash":
        raise RuntimeError("a bug in the handler")
    await asyncio.sleep(0.001)
    return request[::-1]


@asynccontextmanager
async def echo_server(
    count: int, handler: grpc.RpcMethodHandler | None = None
) -> AsyncIterator[tuple[grpc.aio.Channel, CallAcceptors, grpc.aio.Server]]:
    """A ``grpc.aio`` server on a free loopback port with ``count`` acceptors for ``ECHO``; ``OTHER``
    is served by a generic handler only, as conch serves its other methods. Both run ``handler``
    (default: :func:`echo`)."""
    server = grpc.aio.server()
    handler = handler or grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Echo", {"Echo": handler, "Other": handler}),)
    )
    accepting = CallAcceptors(server, ECHO, handler, count)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    accepting.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel, accepting, server
    finally:
        await channel.close()
        await server.stop(grace=1)


def call(channel: grpc.aio.Channel, method: str = ECHO) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(method)


def test_the_pinned_grpcio_has_every_internal_the_acceptors_use() -> None:
    assert acceptors.missing_internals() == []


def test_concurrent_calls_are_answered_correctly_and_the_acceptors_take_them() -> None:
    async def scenario() -> tuple[list[bytes], int, list[bytes]]:
        async with echo_server(count=4) as (channel, accepting, _):
            requests = [f"call {i}".encode() for i in range(64)]
            answers = await asyncio.gather(*(call(channel)(r) for r in requests))
            return list(answers), accepting.accepted, requests

    answers, accepted, requests = asyncio.run(scenario())

    assert answers == [r[::-1] for r in requests]
    assert accepted > 0, "every call went through grpc.aio's own request: the acceptors took none"


def test_without_acceptors_grpc_aio_accepts_every_call_itself() -> None:
    async def scenario() -> tuple[list[bytes], int]:
        async with echo_server(count=0) as (channel, accepting, _):
            answers = await asyncio.gather(*(call(channel)(b"abc") for _ in range(16)))
            return list(answers), accepting.accepted

    answers, accepted = asyncio.run(scenario())

    assert answers == [b"cba"] * 16
    assert accepted == 0


def test_an_abort_reaches_the_client_with_its_status_and_other_calls_are_unaffected() -> None:
    async def scenario() -> tuple[grpc.aio.AioRpcError, list[bytes], bytes]:
        async with echo_server(count=4) as (channel, _, _):
            outcomes = await asyncio.gather(
                call(channel)(b"refuse"), *(call(channel)(b"ok") for _ in range(8)), return_exceptions=True
            )
            error, answers = outcomes[0], outcomes[1:]
            assert isinstance(error, grpc.aio.AioRpcError)
            return error, [a for a in answers if isinstance(a, bytes)], await call(channel, OTHER)(b"xy")

    error, answers, other = asyncio.run(scenario())

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "refused on purpose"
    assert answers == [b"ko"] * 8
    assert other == b"yx"  # a method without acceptors is still served by the generic handler


def test_a_client_deadline_ends_the_call_and_the_server_keeps_answering() -> None:
    async def scenario() -> tuple[grpc.aio.AioRpcError, bytes]:
        async with echo_server(count=4) as (channel, _, _):
            try:
                await call(channel)(b"slow", timeout=0.1)
            except grpc.aio.AioRpcError as exc:
                error = exc
            else:
                raise AssertionError("a 1 s call finished within a 0.1 s deadline")
            return error, await call(channel)(b"after")

    error, after = asyncio.run(scenario())

    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert after == b"retfa"


def test_an_unexpected_exception_ends_the_call_unknown_as_grpc_aio_ends_it() -> None:
    async def scenario() -> tuple[grpc.aio.AioRpcError, bytes]:
        async with echo_server(count=4) as (channel, _, _):
            try:
                await call(channel)(b"crash")
            except grpc.aio.AioRpcError as exc:
                error = exc
            else:
                raise AssertionError("a handler that raised answered")
            return error, await call(channel)(b"after")

    error, after = asyncio.run(scenario())

    assert error.code() == grpc.StatusCode.UNKNOWN
    assert "a bug in the handler" in (error.details() or "")
    assert after == b"retfa"


async def reversed_each(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request[::-1]


def test_a_streaming_method_is_accepted_through_grpc_aio_own_dispatch() -> None:
    async def scenario() -> tuple[list[list[bytes]], int]:
        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(reversed_each)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("test.Echo", {"Stream": handler}),)
        )
        accepting = CallAcceptors(server, "/test.Echo/Stream", handler, 4)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        accepting.start()

        async def one_stream(channel: grpc.aio.Channel) -> list[bytes]:
            stream = channel.stream_stream("/test.Echo/Stream")(iter([b"ab", b"cde"]))
            return [answer async for answer in stream]

        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                answers = await asyncio.gather(*(one_stream(channel) for _ in range(32)))
                return list(answers), accepting.accepted
        finally:
            await server.stop(grace=1)

    answers, accepted = asyncio.run(scenario())

    assert answers == [[b"ba", b"edc"]] * 32
    assert accepted > 0, "every stream went through grpc.aio's own request: the acceptors took none"


def acceptor_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("accept ")]


def test_the_acceptors_end_when_the_server_stops() -> None:
    async def scenario() -> tuple[int, int]:
        async with echo_server(count=4) as (channel, _, _):
            await call(channel)(b"abc")
            while_serving = len(acceptor_tasks())
        await asyncio.sleep(0.05)  # the core failed the pending requests; let the tasks see it
        return while_serving, len(acceptor_tasks())

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=10)) == (4, 0)


def test_a_grpcio_without_the_internals_accepts_as_grpc_aio_does_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A grpcio whose core lacks one of the names (deleting a real one would break grpc.aio itself).
    monkeypatch.setattr(acceptors, "_CYGRPC_NAMES", (*acceptors._CYGRPC_NAMES, "_renamed_in_a_later_grpcio"))

    async def scenario() -> tuple[list[bytes], int, int]:
        async with echo_server(count=4) as (channel, accepting, _):
            answers = await asyncio.gather(*(call(channel)(b"abc") for _ in range(8)))
            return list(answers), accepting.count, accepting.accepted

    with caplog.at_level(logging.WARNING, logger=acceptors.__name__):
        answers, count, accepted = asyncio.run(scenario())

    assert answers == [b"cba"] * 8
    assert (count, accepted) == (0, 0)
    assert "cygrpc._renamed_in_a_later_grpcio" in caplog.text


def test_each_accepted_call_runs_in_one_task_without_grpc_aio_watcher_and_handler_tasks() -> None:
    async def scenario() -> tuple[list[str], list[bytes], int]:
        async with echo_server(count=4) as (channel, accepting, _):
            calls = asyncio.gather(*(call(channel)(b"brief") for _ in range(16)))
            await asyncio.sleep(0.15)  # every call is in its handler now
            names = [t.get_name() for t in asyncio.all_tasks()]
            return names, list(await calls), accepting.accepted

    names, answers, accepted = asyncio.run(scenario())

    assert answers == [b"feirb"] * 16
    ours = names.count(f"call {ECHO}")
    assert ours == accepted > 0
    # grpc.aio's own request may take a few calls: those, and only those, run in its two tasks
    assert names.count(f"HandleExceptions[{ECHO}]") == 16 - accepted


def test_trailing_metadata_a_handler_sets_reaches_the_client() -> None:
    async def scenario() -> tuple[bytes, Any]:
        async with echo_server(count=4) as (channel, _, _):
            pending = call(channel)(b"tagged")
            answer = await pending
            return answer, await pending.trailing_metadata()

    answer, trailing = asyncio.run(scenario())

    assert answer == b"deggat"
    assert ("conch-request-id", "r-42") in list(trailing)


def test_a_code_set_without_aborting_ends_the_call_with_it() -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        async with echo_server(count=4) as (channel, _, _):
            try:
                await call(channel)(b"coded")
            except grpc.aio.AioRpcError as exc:
                return exc
            raise AssertionError("a call whose handler set FAILED_PRECONDITION answered OK")

    error = asyncio.run(scenario())

    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == "set without aborting"


def test_a_call_in_flight_when_the_server_stops_is_answered_within_the_grace_period() -> None:
    async def scenario() -> bytes:
        async with echo_server(count=4) as (channel, _, server):
            pending = asyncio.ensure_future(call(channel)(b"brief"))
            await asyncio.sleep(0.1)
            await server.stop(grace=2)
            return await pending

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=10)) == b"feirb"


def test_a_call_that_outlives_the_grace_period_fails_and_its_late_answer_is_dropped_safely() -> None:
    async def scenario() -> BaseException | bytes:
        async with echo_server(count=4) as (channel, _, server):
            pending = asyncio.ensure_future(call(channel)(b"slow"))
            await asyncio.sleep(0.1)
            await server.stop(grace=0.2)  # the handler still sleeps: its call is cancelled
            outcome = (await asyncio.gather(pending, return_exceptions=True))[0]
            await asyncio.sleep(1.0)  # the handler answers after the server stopped
            return outcome

    outcome = asyncio.run(asyncio.wait_for(scenario(), timeout=10))

    assert isinstance(outcome, grpc.aio.AioRpcError), outcome
    assert outcome.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)


def test_a_handler_that_is_not_a_coroutine_function_is_served_through_grpc_aio() -> None:
    def shout(request: bytes, context: Any) -> bytes:
        return request.upper()

    async def scenario() -> tuple[list[bytes], int]:
        handler = grpc.unary_unary_rpc_method_handler(shout)
        async with echo_server(count=4, handler=handler) as (channel, accepting, _):
            answers = await asyncio.gather(*(call(channel)(b"abc") for _ in range(8)))
            return list(answers), accepting.accepted

    answers, accepted = asyncio.run(scenario())

    assert answers == [b"ABC"] * 8
    assert accepted > 0


def ascii_only(raw: bytes) -> bytes:
    """A request deserializer that refuses some bytes, as protobuf's parser refuses a malformed message."""
    return raw.decode("ascii").encode()


def test_a_request_the_deserializer_refuses_ends_invalid_argument_and_others_go_on() -> None:
    async def scenario() -> tuple[list[grpc.aio.AioRpcError], bytes]:
        handler = grpc.unary_unary_rpc_method_handler(echo, request_deserializer=ascii_only)
        async with echo_server(count=4, handler=handler) as (channel, _, _):
            refused = (call(channel)(b"\xff\xfe") for _ in range(16))
            outcomes = await asyncio.gather(*refused, return_exceptions=True)
            return [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)], await call(channel)(b"fine")

    errors, after = asyncio.run(asyncio.wait_for(scenario(), timeout=10))

    assert len(errors) == 16
    # The calls the acceptors took say what was wrong; any grpc.aio took itself end UNKNOWN, as it ends them.
    ours = [e for e in errors if e.code() == grpc.StatusCode.INVALID_ARGUMENT]
    assert ours, [e.code() for e in errors]
    assert {e.details() for e in ours} == {unary_call.UNPARSABLE}
    assert all(e.code() == grpc.StatusCode.UNKNOWN for e in errors if e not in ours)
    assert after == b"enif"
