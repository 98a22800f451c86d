"""How fast this machine's cores ran while a benchmark ran: a fixed loop, timed in CPU time.

Why: on a virtual machine, a server's rate can swing from one measurement window to the next with
nothing in the server changing. ``steal`` in ``/proc/stat`` counts only the time a virtual CPU was not
running at all; a busy neighbour on the same physical core (its hyperthread sibling, shared caches
and memory bandwidth) slows every instruction instead, and shows as nothing. A fixed piece of work
timed in the CPU time of the thread that ran it (not wall time: waiting for a core is the load's
doing, not the machine's) takes longer when that happens. The probe runs it a few times a second
on a thread of the harness, costing about 0.2 % of one core, and reports how its times spread.

Its limit: on cores that the load keeps busy, the probe is preempted and shares caches with the
load, and that contention dominates (87 to 91 % swing in every run of
``bench/results/2026-12-02-033028-stability.md``, stable or not). It tells the host's drift apart
on a quiet machine (230 to 375 µs a probe here) and in the harness's idle moments.
"""

from __future__ import annotations

import statistics
import threading
import time
from types import TracebackType

#: Iterations of the probe's loop: about 0.3 ms of a core of the development machine.
LOOP = 5_000
#: Seconds between two probes.
INTERVAL_S = 0.2


def probe_ns(loop: int = LOOP) -> int:
    """CPU nanoseconds this thread spent on ``loop`` iterations of fixed integer work."""
    started = time.thread_time_ns()
    total = 0
    for number in range(loop):
        total += number * number % 7
    return time.thread_time_ns() - started


class CoreSpeedProbe:
    """Times :func:`probe_ns` every :data:`INTERVAL_S` on a thread of its own while in its ``with``."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.samples_ns: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="core-speed-probe", daemon=True)

    def __enter__(self) -> CoreSpeedProbe:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples_ns.append(probe_ns())

    def swing(self) -> float | None:
        """How much slower the slow probes ran than the fast ones: the 90th over the 10th percentile
        of the probe times, minus one (0.25: 25 % slower); None with fewer than 10 probes."""
        if len(self.samples_ns) < 10:
            return None
        deciles = statistics.quantiles(self.samples_ns, n=10)
        return deciles[-1] / deciles[0] - 1
