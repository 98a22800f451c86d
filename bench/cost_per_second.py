"""What each second of a load run cost: requests the server finished, and the CPU each took in the
server and in the load generator.

Why: when a run's throughput swings, the question is whose cost moved. The load generator's work per
request does not depend on the server, so the two together tell the causes apart:

- both processes spend more CPU per request in the slow seconds: the machine ran slower (a host's
  neighbours, its clock, its caches), and neither server nor client did more work;
- only the server spends more: the server did extra work per request (a collection, a cold path);
- neither spends more: the requests waited without using a core (a timer, a lock, a stolen CPU).

The mean batch of each interval says whether the slow seconds also batched differently: smaller
batches cost a server more per request, so the server's cost rising alone with them points at batch
formation. Two readings need care: a server that polls while idle (conch's ``--busy-poll-us``, at
few clients) uses a core whatever its rate, so its CPU per request there follows one over the rate;
and where the two processes keep every core busy, any fall in rate must show as a rise in their
costs, so the question there is whose cost rose: the server's alone, or both.

:func:`slow_against_fast` sets the slowest third of a run's seconds against its fastest third.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from bench.servers import ServerProcess, cpu_reading, process_cpu_seconds, stats_reading


@dataclass(frozen=True)
class Second:
    """One interval of a run: requests per second, CPU microseconds per request in the server's
    processes (with its children, as Triton's python model processes) and in the load generator, and
    the mean batch the model ran (rows per execution; None where the server did not say)."""

    rate: float
    server_us: float
    client_us: float
    batch: float | None = None


@dataclass(frozen=True)
class Contrast:
    """The slowest third of a run's seconds over its fastest third, as ratios of their means."""

    rate: float
    server_us: float
    client_us: float
    batch: float | None = None

    def describe(self) -> str:
        rate, server, client = self.rate, self.server_us, self.client_us
        text = f"rate {rate:.2f}x, server CPU/request {server:.2f}x, client {client:.2f}x"
        return text if self.batch is None else f"{text}, batch {self.batch:.2f}x"


#: Fewer intervals than this give thirds too small to compare.
MIN_SECONDS = 6


def sample_seconds(
    client: subprocess.Popen[bytes],
    server: ServerProcess,
    model: str,
    interval_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[Second]:
    """Sample the server and ``client`` every ``interval_s`` until ``client`` exits.

    Requests are counted by the server's own statistics (``/v2/models/MODEL/stats``), which conch and
    Triton both keep. An interval in which nothing finished, or whose readings failed, is left out, and
    so are the first and the last: the client starting (a process, its connections) and stopping
    would read as slow seconds that are no one's cost per request.
    """
    seconds: list[Second] = []
    previous = _reading(client.pid, server, model, clock)
    while client.poll() is None:
        time.sleep(interval_s)
        current = _reading(client.pid, server, model, clock)
        if previous is not None and current is not None:
            second = _between(previous, current)
            if second is not None:
                seconds.append(second)
        previous = current if current is not None else previous
    return seconds[1:-1]


class _Reading(NamedTuple):
    """Counters at one moment, all since the processes started."""

    time: float
    requests: int
    server_cpu_s: float
    client_cpu_s: float
    rows: int
    executions: int


def _reading(
    client_pid: int, server: ServerProcess, model: str, clock: Callable[[], float]
) -> _Reading | None:
    """A :data:`_Reading` now, or None if any part of it is unknown."""
    stats, server_cpu = stats_reading(server, model), cpu_reading(server)
    client_cpu = process_cpu_seconds(client_pid)
    if stats is None or server_cpu is None or client_cpu is None:
        return None
    return _Reading(
        clock(), stats.request[0], sum(server_cpu), client_cpu, stats.inferences, stats.executions
    )


def _between(earlier: _Reading, later: _Reading) -> Second | None:
    elapsed, requests = later.time - earlier.time, later.requests - earlier.requests
    if elapsed <= 0 or requests <= 0:
        return None
    executions = later.executions - earlier.executions
    return Second(
        requests / elapsed,
        (later.server_cpu_s - earlier.server_cpu_s) / requests * 1e6,
        (later.client_cpu_s - earlier.client_cpu_s) / requests * 1e6,
        (later.rows - earlier.rows) / executions if executions > 0 else None,
    )


def slow_against_fast(seconds: Sequence[Second]) -> Contrast | None:
    """The slowest third of ``seconds`` (by rate) against the fastest third; None with too few, or
    where the fast third spent no CPU that ``/proc`` could count (its clock ticks are 10 ms)."""
    if len(seconds) < MIN_SECONDS:
        return None
    ordered = sorted(seconds, key=lambda s: s.rate)
    third = len(ordered) // 3
    slow, fast = ordered[:third], ordered[-third:]

    def ratio(value: Callable[[Second], float]) -> float | None:
        below = statistics.fmean(map(value, fast))
        return statistics.fmean(map(value, slow)) / below if below > 0 else None

    rate, server, client = ratio(lambda s: s.rate), ratio(lambda s: s.server_us), ratio(lambda s: s.client_us)
    if rate is None or server is None or client is None:
        return None
    slow_batches = [s.batch for s in slow if s.batch is not None]
    fast_batches = [s.batch for s in fast if s.batch is not None]
    batch = None
    if len(slow_batches) == len(fast_batches) == third:  # every second says its batch
        batch = statistics.fmean(slow_batches) / statistics.fmean(fast_batches)
    return Contrast(rate, server, client, batch)


def median_contrast(contrasts: Sequence[Contrast | None]) -> Contrast | None:
    """Each ratio's median over the runs that have one."""
    found = [c for c in contrasts if c is not None]
    if not found:
        return None
    batches = [c.batch for c in found if c.batch is not None]
    return Contrast(
        statistics.median(c.rate for c in found),
        statistics.median(c.server_us for c in found),
        statistics.median(c.client_us for c in found),
        statistics.median(batches) if batches else None,
    )
