"""A response head waits for its body, so each answer is one write to the socket."""

from __future__ import annotations

import asyncio

from conch.frontends.http.coalesced_writes import JOIN_LIMIT, HeadHoldingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"


class RecordingTransport:
    """The socket's side: what was written, in which calls."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def run_turn(body: list[bytes]) -> RecordingTransport:
    async def scenario() -> RecordingTransport:
        sink = RecordingTransport()
        transport = HeadHoldingTransport(sink, asyncio.get_running_loop())
        transport.write(HEAD)
        assert transport.get_write_buffer_size() == len(HEAD)
        for chunk in body:
            transport.write(chunk)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return sink

    return asyncio.run(scenario())


def test_a_head_and_its_body_go_in_one_write() -> None:
    assert run_turn([b"hello"]).writes == [HEAD + b"hello"]


def test_a_head_alone_goes_at_the_end_of_the_turn() -> None:
    assert run_turn([]).writes == [HEAD]


def test_a_large_body_is_not_copied_to_join_its_head() -> None:
    body = b"x" * (JOIN_LIMIT + 1)
    assert run_turn([body]).writes == [HEAD, body]


def test_later_chunks_of_a_stream_go_as_they_come() -> None:
    assert run_turn([b"one", b"two"]).writes == [HEAD + b"one", b"two"]


def test_closing_sends_a_held_head_first_and_the_rest_is_the_transport() -> None:
    async def scenario() -> RecordingTransport:
        sink = RecordingTransport()
        transport = HeadHoldingTransport(sink, asyncio.get_running_loop())
        transport.write(HEAD)
        transport.close()
        assert transport.get_extra_info("peername") == "info peername"
        return sink

    sink = asyncio.run(scenario())
    assert sink.writes == [HEAD] and sink.closed


def test_data_that_is_not_a_head_is_written_at_once() -> None:
    async def scenario() -> RecordingTransport:
        sink = RecordingTransport()
        HeadHoldingTransport(sink, asyncio.get_running_loop()).write(b"some body\r\n\r\n")
        return sink

    assert asyncio.run(scenario()).writes == [b"some body\r\n\r\n"]
