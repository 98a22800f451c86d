"""Keeps the event loop turning for a moment after the server goes idle.

Why: a thread asleep in ``epoll_wait`` takes a wake-up to notice a new request, and on a virtual
machine whose idle CPUs halt, each wake-up costs tens of microseconds (two threads bouncing a byte
over a socketpair: 40 us per round trip on the 2-core development machine, ``python -m
bench.wakeup``). A lone gRPC call crosses from gRPC's poller thread to the event loop several times
(the call, its message, the completion of its answer), and the loop sleeps in between; an empty
``grpc.aio`` servicer answered one client in 0.41 ms at p50 with a sleeping loop and 0.28 ms with a
turning one.

So once no request is in the server, the loop polls instead of sleeping for ``window`` seconds: a
client that sends its next request within it (a client waiting on each answer does) is read by a
running thread. While requests are in the server the loop has their work to do, and a model
computing on a worker thread needs the cores, so nothing spins then; an idle server does not spin
either, once the window has passed.
"""

from __future__ import annotations

import asyncio
import time

from conch.scheduling.scheduler import RequestsInFlight


def poll_when_idle(
    loop: asyncio.AbstractEventLoop,
    in_flight: RequestsInFlight,
    window_s: float,
    after_lone_only: bool = False,
) -> BusyPoll:
    """Hook a :class:`BusyPoll` to ``in_flight``: each time its last request leaves, ``loop`` polls.

    ``after_lone_only``: poll only when that request had been alone in the server since it was last
    empty. Why: the model process behind ``--proxies`` empties between two of a proxy's messages
    even under load, as it answers faster than the proxies decode and encode. Polling through those
    gaps kept it on a core all the time (its CPU per ``tiny`` request at 32 HTTP clients: 78 to 83 us,
    against 50 to 55 with this), the core the proxies needed; a lone client's requests still find it
    polling.
    """
    poll = BusyPoll(loop, in_flight, window_s)
    in_flight.on_idle = poll.after_lone_request if after_lone_only else poll.server_idle
    return poll


class BusyPoll:
    """Polls the loop for ``window_s`` after each moment the server becomes idle.

    With ``busy_below`` 2 it also polls while one request is in flight: a proxy process of
    ``--proxies`` has nothing to do while the model process computes a lone request's answer,
    and polling reads that answer without a wake-up (call :meth:`server_idle` as the request
    leaves for the model process too). With more in flight it sleeps, as the cores are needed.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        in_flight: RequestsInFlight,
        window_s: float,
        busy_below: int = 1,
    ) -> None:
        self._loop = loop
        self._in_flight = in_flight
        self._window_s = window_s
        self._busy_below = busy_below
        self._until = 0.0
        self.spinning = False

    def server_idle(self) -> None:
        """The last request in the server has its answer: poll until the window closes."""
        self._until = time.perf_counter() + self._window_s
        if not self.spinning:
            self.spinning = True
            self._loop.call_soon(self._turn)

    def after_lone_request(self) -> None:
        """:meth:`server_idle`, where the request that just left had been the only one inside."""
        if self._in_flight.peak == 1:
            self.server_idle()

    def _turn(self) -> None:
        # A ready callback makes the loop poll its sockets without blocking, then call this again.
        if self._in_flight.count < self._busy_below and time.perf_counter() < self._until:
            self._loop.call_soon(self._turn)
        else:
            self.spinning = False
