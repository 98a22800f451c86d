"""``python -m bench.ort_run_cost``: what one ONNX Runtime run costs the thread that calls it, warm
and cold, through ``InferenceSession.run`` and through conch's ``session_runner``.

Why: at 32 gRPC clients a batch of ~20 rows of ``s64`` measured 113 to 129 us of execution inside
the server (``/v2/models/s64/stats``) against 21 to 30 us in a process of its own, and ``tiny`` ~100
us against ~10. The thread's CPU time during the run matched its wall time, so the run was not
waiting for the GIL or for a core: it was doing more work. This shows where that work comes from: the
same run, back to back (warm), with Python work between runs as the event loop does a batch's gRPC
and HTTP work between two runs (cold caches), and after a 1 ms sleep (an idle core). It also times
``session_runner``, which skips the Python wrapper's per-run checks.

Figures are CPU time of the calling thread (``time.thread_time_ns``), medians of ``--runs`` runs,
with the session options conch gives a model without ``parameters`` on 2 cores (``session_options``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from bench.models import MODELS, mlp_model
from conch.backends.onnxruntime import session_options, session_runner

BETWEEN = ("nothing", "python work", "1 ms sleep")


def between_runs(kind: str) -> Callable[[int], None]:
    """What is done before run ``index``: nothing, Python work over a list of about what a turn of
    the loop touches in a batch, or a 1 ms sleep."""
    work = list(range(2_000_000)) if kind == "python work" else []

    def before(index: int) -> None:
        if work:
            sum(work[(index * 37) % 1000 : 200_000 : 7])
        elif kind == "1 ms sleep":
            time.sleep(0.001)

    return before


def median_runs_us(
    runs: dict[str, Callable[[], Any]], between: Callable[[int], None], count: int
) -> dict[str, float]:
    """The median CPU time of each of ``runs`` on this thread, with ``between`` done before each run.
    The runs take turns, so a drift of the machine's speed weighs on them alike."""
    for run in runs.values():
        for _ in range(50):
            run()
    spent: dict[str, list[int]] = {label: [] for label in runs}
    for index in range(count):
        for label, run in runs.items():
            between(index)
            started = time.thread_time_ns()
            run()
            spent[label].append(time.thread_time_ns() - started)
    return {label: statistics.median(times) / 1e3 for label, times in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,s64,s256", help="sizes of bench.models.MODELS")
    parser.add_argument("--rows", default="1,20", help="batch sizes")
    parser.add_argument("--runs", type=int, default=600)
    args = parser.parse_args()
    options = session_options(mc.ModelConfig(), cores=2)
    print("| model | rows | between runs | InferenceSession.run | session_runner |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        model = mlp_model(MODELS[name]).SerializeToString()
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        runner = session_runner(session)
        for rows in (int(r) for r in args.rows.split(",")):
            feed = {"INPUT0": np.random.default_rng(0).random((rows, MODELS[name][0]), dtype=np.float32)}
            for between in BETWEEN:
                runs = {
                    "wrapper": partial(session.run, ["OUTPUT0"], feed),
                    "runner": partial(runner, ["OUTPUT0"], feed),
                }
                us = median_runs_us(runs, between_runs(between), args.runs)
                print(
                    f"| {name} | {rows} | {between} | {us['wrapper']:.0f} us | {us['runner']:.0f} us |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
