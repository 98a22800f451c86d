"""Turns shared by the versions of one model while a release sends clients to both: their executions
wait in one first-come line, at most as many at once as the larger version has instances.

Why: each version has its own batcher and instances, so during a release two copies of the model
compute side by side where the baseline alone computed one batch at a time. On two cores they then
fight for the cores, and unevenly: one version's batch runs on the event loop while the other's runs
on its worker thread, so one waits for the other's executions and the other does not. A candidate of
the very same graph answered clients 1.87x slower at P95 in one release (and 0.76x in the next) on a
saturated server, and the gate rightly read that as a regression. Taking turns makes the two
versions' answers come from the same line, so a latency difference the gate sees is the candidate's
own, and the server does no more work at once than it did before the release.

The lifecycle says which models take turns (:func:`share_turns`); any other model, and a release in
a dark launch or at 100%, runs as before, each version on its own instances only.

The line is the release's doing, not the version's: each version counts how long it waited in it
(:class:`LineWaits`), and the gate times an answer without the waits of its version while it was in
the server. Timed whole, a candidate whose compute doubled answered clients only 1.05x and 1.08x
slower than its baseline at P95, for both versions waited mostly for each other's executions.
"""

from __future__ import annotations

import asyncio
from collections import deque


class ModelTurns:
    """A first-come line of executions, ``limit`` at a time (the most instances of any version that
    took a turn, so a release never runs fewer at once than its baseline did alone)."""

    def __init__(self) -> None:
        self.limit = 1
        self.running = 0
        #: Turns given so far: a batcher waiting for company reads it to see that another execution
        #: took a turn meanwhile (:meth:`DynamicBatcher._turns_for_company`).
        self.given = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        #: Moving average of every version's executions in the line, in ns (None before the first).
        #: The versions' pools read it instead of their own, so both place and batch their executions
        #: alike: a canary's small batches had left the candidate running on the event loop with a
        #: short wait for company and the baseline on its thread with a long one, and two identical
        #: versions then answered at 50% with P95s 0.4 to 1.2 times apart, step after step.
        self.average_ns: float | None = None

    def observe(self, spent_ns: float, smoothing: float) -> None:
        """One execution of either version, into the line's moving average."""
        average = self.average_ns
        self.average_ns = spent_ns if average is None else average + (spent_ns - average) * smoothing

    async def take(self, instances: int) -> None:
        """Wait for a turn; ``instances`` is the caller's version's instance count."""
        if instances > self.limit:
            self.limit = instances
            self._pass_on()
        if self.running < self.limit and not self._waiting:
            self.running += 1
            self.given += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give()  # the turn came as the caller was cancelled: pass it on
            else:
                self._waiting.remove(turn)
            raise

    def give(self) -> None:
        """An execution ended: the next in line runs."""
        self.running -= 1
        self._pass_on()

    def disband(self) -> None:
        """The line is no longer needed: everyone waiting in it goes on at once."""
        self.limit = 1 << 30
        self._pass_on()

    def _pass_on(self) -> None:
        while self._waiting and self.running < self.limit:
            self.running += 1
            self.given += 1
            self._waiting.popleft().set_result(None)


class LineWaits:
    """How long one version has had an execution waiting for a turn, summed over time (waits that
    overlap count once). A request's share is the growth of :meth:`total` while it was in the server:
    its own batch's wait and the waits that held its version's instance while it queued."""

    __slots__ = ("_since", "_total_ns", "_waiting", "used")

    def __init__(self) -> None:
        self.used = False  # no line yet: the request path skips the clock readings
        self._total_ns = 0
        self._waiting = 0
        self._since = 0

    def begin(self, now: int) -> None:
        """An execution of this version starts waiting for a turn."""
        self.used = True
        if not self._waiting:
            self._since = now
        self._waiting += 1

    def end(self, now: int) -> None:
        """That execution got its turn (or gave up waiting)."""
        self._waiting -= 1
        if not self._waiting:
            self._total_ns += now - self._since

    def total(self, now: int) -> int:
        """Nanoseconds waited so far, the wait under way included."""
        return self._total_ns + (now - self._since if self._waiting else 0)


_shared: dict[str, ModelTurns] = {}


def share_turns(models: set[str]) -> None:
    """From now on the versions of exactly ``models`` take turns; others run each on its own. A model
    that stops taking turns lets the executions already in its line go on as they come."""
    for model in list(_shared):
        if model not in models:
            _shared.pop(model).disband()
    for model in models:
        _shared.setdefault(model, ModelTurns())


def turns_of(model: str) -> ModelTurns | None:
    """The line ``model``'s executions wait in, or None while its versions run each on its own."""
    return _shared.get(model)
