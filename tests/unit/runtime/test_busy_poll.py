"""``BusyPoll``: the loop keeps polling for a window after the server goes idle, and only then."""

from __future__ import annotations

import asyncio
import socket

from conch.runtime.busy_poll import BusyPoll, poll_when_idle
from conch.scheduling.scheduler import RequestsInFlight


def polling(window_s: float) -> tuple[RequestsInFlight, BusyPoll]:
    """A request counter with busy polling hooked to the running loop, as ``conch serve`` does."""
    in_flight = RequestsInFlight()
    return in_flight, poll_when_idle(asyncio.get_running_loop(), in_flight, window_s)


def test_the_last_request_leaving_starts_the_window_and_the_window_closes() -> None:
    async def scenario() -> None:
        in_flight, poll = polling(window_s=0.05)
        in_flight.enter()
        in_flight.enter()
        in_flight.leave()
        assert not poll.spinning, "a request is still in the server"

        in_flight.leave()
        assert poll.spinning
        await asyncio.sleep(0.01)
        assert poll.spinning, "10 ms into a 50 ms window"
        await asyncio.sleep(0.08)
        assert not poll.spinning, "the window has closed"

    asyncio.run(scenario())


def test_a_request_arriving_stops_the_polling_at_once() -> None:
    async def scenario() -> None:
        in_flight, poll = polling(window_s=10.0)
        in_flight.enter()
        in_flight.leave()
        assert poll.spinning

        in_flight.enter()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

        assert not poll.spinning, "the loop has the request's work to do"

    asyncio.run(scenario())


def test_the_loop_still_reads_sockets_and_runs_timers_while_it_polls() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        in_flight, poll = polling(window_s=10.0)
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        in_flight.enter()
        in_flight.leave()

        writer.send(b"next request")
        received = await asyncio.wait_for(loop.sock_recv(reader, 100), timeout=1)
        await asyncio.wait_for(asyncio.sleep(0.02), timeout=1)

        assert received == b"next request"
        assert poll.spinning, "still inside its 10 s window"
        in_flight.enter()  # ends the polling before the loop closes
        reader.close()
        writer.close()

    asyncio.run(scenario())


def test_behind_frontends_only_a_lone_request_leaving_starts_the_window() -> None:
    async def scenario() -> None:
        in_flight = RequestsInFlight()
        poll = poll_when_idle(asyncio.get_running_loop(), in_flight, 10.0, after_lone_only=True)
        in_flight.enter()
        in_flight.enter()
        in_flight.leave()
        in_flight.leave()
        assert not poll.spinning, "two requests were inside at once: the frontends are busy"

        in_flight.enter()
        in_flight.leave()
        assert poll.spinning, "the peak of the busy time before was forgotten; this request was alone"
        in_flight.enter()  # ends the polling before the loop closes
        await asyncio.sleep(0)

    asyncio.run(scenario())
