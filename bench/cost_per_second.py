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

from bench.servers import ServerProcess, cpu_reading, process_cpu_seconds, stats_reading


@dataclass(frozen=True)
class Second:
    """One interval of a run: requests per second, CPU microseconds per request in the server's
    processes (with its children, as Triton's python model processes) and in the load generator, and
    the mean batch the model ran (rows per execution; 0 where the server did not say)."""

    rate: float
    server_us: float
    client_us: float
    batch: float = 0.0


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


#: (time, requests finished, server CPU seconds, client CPU seconds, rows inferred, executions)
_Reading = tuple[float, int, float, float, int, int]


def _reading(
    client_pid: int, server: ServerProcess, model: str, clock: Callable[[], float]
) -> _Reading | None:
    """A :data:`_Reading` now, or None if any part of it is unknown."""
    stats, server_cpu = stats_reading(server, model), cpu_reading(server)
    client_cpu = process_cpu_seconds(client_pid)
    if stats is None or server_cpu is None or client_cpu is None:
        return None
    return clock(), stats.request[0], sum(server_cpu), client_cpu, stats.inferences, stats.executions


def _between(earlier: _Reading, later: _Reading) -> Second | None:
    elapsed, requests = later[0] - earlier[0], later[1] - earlier[1]
    if elapsed <= 0 or requests <= 0:
        return None
    executions = later[5] - earlier[5]
    return Second(
        requests / elapsed,
        (later[2] - earlier[2]) / requests * 1e6,
        (later[3] - earlier[3]) / requests * 1e6,
        (later[4] - earlier[4]) / executions if executions > 0 else 0.0,
    )


def slow_against_fast(seconds: Sequence[Second]) -> Contrast | None:
    """The slowest third of ``seconds`` (by rate) against the fastest third; None with too few."""
    if len(seconds) < MIN_SECONDS:
        return None
    ordered = sorted(seconds, key=lambda s: s.rate)
    third = len(ordered) // 3
    slow, fast = ordered[:third], ordered[-third:]

    def ratio(value: Callable[[Second], float]) -> float:
        return statistics.fmean(map(value, slow)) / statistics.fmean(map(value, fast))

    batched = all(s.batch > 0 for s in slow + fast)
    return Contrast(
        ratio(lambda s: s.rate),
        ratio(lambda s: s.server_us),
        ratio(lambda s: s.client_us),
        ratio(lambda s: s.batch) if batched else None,
    )


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
