"""``python -m bench.core_speed``: does this machine's core speed drift, and does a busy core slow another?

Why: on a virtual machine a server's rate can swing from one window to the next with nothing in the
server changing. ``steal`` in ``/proc/stat`` counts only the time a virtual CPU did not run at all; a
busy neighbour on the host slows every instruction instead and shows as nothing. A fixed loop timed
in the CPU time of the thread that ran it (not wall time: waiting for a core is the load's doing)
takes longer when that happens. Run it on a quiet machine: under a benchmark's load the probe is
preempted and shares caches with the load, and that contention dominates (a probe thread inside
``bench.stability`` swung 87 to 91 % in every run, stable or not, so it was taken out again).

It pins itself to core 0 and times the loop with core 1 idle, then with core 1 spinning a Python
loop: if the two virtual cores share one physical core, the second figure is higher.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Sequence

#: Iterations of the probe's loop: about 0.35 ms of a core of the development machine.
LOOP = 5_000


def probe_ns(loop: int = LOOP) -> int:
    """CPU nanoseconds this thread spent on ``loop`` iterations of fixed integer work."""
    started = time.thread_time_ns()
    total = 0
    for number in range(loop):
        total += number * number % 7
    return time.thread_time_ns() - started


def spread(samples_ns: Sequence[int]) -> str:
    """10th, 50th and 90th percentile of the probe times, in µs."""
    deciles = statistics.quantiles(samples_ns, n=10)
    middle = statistics.median(samples_ns)
    return f"p10 {deciles[0] / 1e3:.0f} µs, p50 {middle / 1e3:.0f} µs, p90 {deciles[-1] / 1e3:.0f} µs"


def _spin(core: int) -> None:
    os.sched_setaffinity(0, {core})
    while True:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.core_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=400, help="probes per figure (default 400)")
    args = parser.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})
    print(f"core {cores[0]}, the others idle: {spread([probe_ns() for _ in range(args.probes)])}")
    if len(cores) > 1:
        spinner = multiprocessing.Process(target=_spin, args=(cores[1],), daemon=True)
        spinner.start()
        time.sleep(0.2)
        try:
            print(
                f"core {cores[0]}, core {cores[1]} busy: {spread([probe_ns() for _ in range(args.probes)])}"
            )
        finally:
            spinner.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
