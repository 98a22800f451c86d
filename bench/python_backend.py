"""``python -m bench.python_backend``: the same Triton python-backend ``model.py`` on Triton 2.51 and
on conch, under the same load, in one run.

Why: conch runs Triton's python-backend models unmodified (``conch/backends/python/``); a user moving
a model repository asks whether the same file is as fast on conch. Both servers load the same files
(``bench.models.write_python_backend_repository``) for each selected ONNX model (``tiny`` by
default), with the same config: ``max_batch_size: 64``, ``dynamic_batching`` with 500 us of queue
delay, one ``KIND_CPU`` instance, as a user on two cores would set them:

- ``NAME_python``: ``peer_code/triton_model.py``, an ONNX Runtime session made in ``initialize``;
  ``execute`` concatenates the batch's inputs, runs once and splits the output per request;
- ``NAME_bls``: ``peer_code/bls_model.py``, one ``async_exec`` per request to ``NAME_python``
  (awaited together), answering with its output;
- conch only, ``NAME_bls_onnx``: the same BLS file calling ``NAME_onnx``, the ONNX file served
  natively (the Triton here has only its python backend). Its ratio is to Triton's ``NAME_bls``.

perf_analyzer drives each model over HTTP and gRPC at concurrency 1 and 32. Rounds (3, 1 with
``--quick``) alternate the order of the two servers (conch then Triton, Triton then conch...), and
every ratio is paired: conch's figure over Triton's from the same round. The report gives the median
and the worst round of each ratio, and every round's ratio beside them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Protocol

from bench import loadgen, ort_limit
from bench.models import MAX_BATCH_SIZE, MAX_QUEUE_DELAY_US, MODELS, python_backend_models
from bench.models import write_python_backend_repository as write_repository
from bench.peers import PEERS, PeerUnavailable, package_versions, serve_conch, serve_triton
from bench.python_backend_report import render
from bench.report import CONCURRENCIES, BenchResults, Point, Row
from bench.run import (
    add_round_arguments,
    choices,
    conch_revision,
    describe_machine,
    keep_log,
    loadavg,
    other_load,
    round_order,
    server_metadata,
    settle_round_arguments,
)
from bench.servers import ServerError, ServerProcess, measure_between
from conch.cli.progress import Steps, stdout_console

PROTOCOLS = ("http_pa", "grpc")
WARMUP_S = 1.0
#: Before each server starts, wait up to QUIET_WAIT_S for the cores to be less busy than this.
QUIET = 0.15
QUIET_WAIT_S = 20.0


@dataclass(frozen=True)
class Side:
    """One of the two servers: its name in the report and how it starts on a repository."""

    key: str
    title: str
    serve: Callable[[Path, Path], ServerProcess]
    #: Whether it also gets the ONNX callee (conch serves ONNX natively; the Triton here cannot).
    onnx_callee: bool


SIDES = (
    Side("conch", "conch", serve_conch, onnx_callee=True),
    Side("triton", PEERS["triton"].title, serve_triton, onnx_callee=False),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.python_backend", description=__doc__.splitlines()[0]
    )
    add_round_arguments(parser)
    parser.add_argument(
        "--models", default="tiny", help=f"ONNX models (default tiny; of {', '.join(MODELS)})"
    )
    args = parser.parse_args(argv)
    args.models = choices(parser, "--models", args.models, MODELS)
    return settle_round_arguments(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    served = {side.key: _served(args.models, side.onnx_callee) for side in SIDES}
    results = BenchResults(
        started=started.strftime("%Y-%m-%d %H:%M UTC"),
        machine=describe_machine(),
        method=describe_method(args.seconds, args.models, args.rounds),
        models=list(served["conch"]),
    )
    print(f"bench.python_backend: {', '.join(results.models)}, {args.seconds:g} s per point", flush=True)
    rows = {side.key: [Row(side.key, side.title, protocol) for protocol in PROTOCOLS] for side in SIDES}
    results.rows += [row for side in SIDES for row in rows[side.key]]
    sides = {side.key: side for side in SIDES}
    points = args.rounds * len(results.rows) * len(results.models) * len(CONCURRENCIES)
    # On a terminal a bar counts the points (and the raw ORT runs); otherwise the lines below are all.
    with Steps(len(args.models) + points, label="bench.python_backend", console=stdout_console()) as steps:
        for name in args.models:
            steps.step(f"raw ORT {name}", plain=False)
            limits = ort_limit.measure_model(name, args.seconds)
            results.ort |= {model: limits for model, source in served["conch"].items() if source == name}
            steps.advance()
        with tempfile.TemporaryDirectory(prefix="conch-bench-pb-") as folder:
            repositories = {
                side.key: write_repository(Path(folder) / side.key / "repo", args.models, side.onnx_callee)
                for side in SIDES
            }
            for round_number in range(1, args.rounds + 1):
                steps.note(f"round {round_number} of {args.rounds}")
                for key in round_order(list(sides), round_number):
                    workdir = Path(folder) / key
                    measure = partial(
                        measure_models, served[key], rows[key], workdir, round_number, args.seconds, steps
                    )
                    run_side(
                        sides[key],
                        repositories[key],
                        workdir,
                        rows[key],
                        results,
                        round_number,
                        measure,
                        steps,
                    )
    results.machine.append(f"load average at the end: {loadavg()}")
    text = render(results, [side.key for side in SIDES])
    print("\n" + text)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".quick.md" if args.quick else ".md"
    path = args.results_dir / (started.strftime("%Y-%m-%d-%H%M%S") + "-python-backend" + suffix)
    path.write_text(text)
    print(f"bench.python_backend: written to {path}")
    return 0


def _served(names: Sequence[str], onnx_callee: bool) -> dict[str, str]:
    """Each measured model -> the ONNX file whose input it takes."""
    return {model: name for name in names for model in python_backend_models(name, onnx_callee)}


class ServerSide(Protocol):
    """What :func:`run_side` needs of a server: its key, its title and how it starts."""

    @property
    def key(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def serve(self) -> Callable[[Path, Path], ServerProcess]: ...


def run_side(
    side: ServerSide,
    repository: Path,
    workdir: Path,
    rows: list[Row],
    results: BenchResults,
    round_number: int,
    measure: Callable[[ServerProcess], None],
    steps: Steps | None = None,
) -> None:
    """Start one server, ``measure`` it, stop it; failures become row notes, never exceptions."""
    steps = steps or Steps(console=stdout_console())
    steps.step(f"{side.key}: waiting for quiet cores", plain=False)
    busy = f"cores {quiet_cores():.0%} busy with other jobs just before it started"
    steps.note(f"{side.key}: {busy}")
    try:
        server = side.serve(repository, workdir)
        with server:
            results.machine.append(server_about(side, server, round_number, busy))
            measure(server)
    except (PeerUnavailable, ServerError, OSError) as exc:
        note = str(exc).splitlines()[0]
        print(f"  {side.key}: {note}", file=sys.stderr, flush=True)
        for row in rows:
            row.note = note
    finally:
        keep_log(workdir / f"{side.key}.log")


def server_about(side: ServerSide, server: ServerProcess, round_number: int, busy: str) -> str:
    """The report's line on a started server: how busy the cores were, conch's commit (others may
    commit while the rounds run) and, in the first round, its metadata and package versions."""
    about = f"round {round_number}, {side.title}: {busy}"
    if side.key == "conch":
        about += f"; conch {conch_revision()}"
    if round_number == 1:
        peer = PEERS[side.key]
        about += f"; {server_metadata(server)}; {package_versions(peer.python(), peer.packages)}"
    return about


def measure_models(
    models: dict[str, str],
    rows: list[Row],
    workdir: Path,
    round_number: int,
    seconds: float,
    steps: Steps,
    server: ServerProcess,
) -> None:
    """Every model's points on a started server."""
    for model, name in models.items():
        measure_model(server, model, name, rows, workdir, round_number, seconds, steps)


def quiet_cores(busy: float = QUIET, wait_s: float = QUIET_WAIT_S) -> float:
    """How busy the cores are, after waiting up to ``wait_s`` for them to drop under ``busy``: the last
    server's processes and ONNX Runtime's spinning threads take a few seconds to go, and another job's
    burst may pass."""
    deadline = time.monotonic() + wait_s
    load = other_load()
    while load > busy and time.monotonic() < deadline:
        load = other_load()
    return load


def measure_model(
    server: ServerProcess,
    model: str,
    name: str,
    rows: list[Row],
    workdir: Path,
    round_number: int,
    seconds: float,
    steps: Steps | None = None,
) -> None:
    """Warm ``model`` (whose input is the ``name`` ONNX file's), then every (protocol, concurrency)
    point; a model whose sanity request fails gets failed points."""
    steps = steps or Steps(console=stdout_console())
    body = workdir / f"{model}.json"
    body.write_bytes(loadgen.infer_body(name))
    url = f"{server.ports.http_url}/v2/models/{model}/infer"
    try:
        server.post_json(f"/v2/models/{model}/infer", body.read_bytes())
    except OSError as exc:
        for row, concurrency in ((row, c) for row in rows for c in CONCURRENCIES):
            row.add(
                (model, concurrency), Point(loadgen.LoadResult.failed(f"sanity request: {exc}")), round_number
            )
        steps.advance(len(rows) * len(CONCURRENCIES))
        return
    loadgen.run_wrk(url, body, max(CONCURRENCIES), WARMUP_S, workdir)
    for row in rows:
        address = server.ports.http_address if row.protocol == "http_pa" else server.ports.grpc_address
        target = loadgen.PerfTarget(
            model, address, "http" if row.protocol == "http_pa" else "grpc", MODELS[name][0]
        )
        for concurrency in CONCURRENCIES:
            steps.step(f"{row.server} {model} {target.protocol} c={concurrency}", plain=False)
            load = partial(loadgen.perf_analyzer_point, target, concurrency, seconds, workdir)
            result, times = measure_between(server, model, load)
            point = Point(
                result, times.compute_ms, times.request_ms, times.server_cpu_us, times.children_cpu_us
            )
            row.add((model, concurrency), point, round_number)
            steps.note(
                f"  {model} {target.protocol} c={concurrency}: {result.throughput:,.0f}/s "
                f"p50 {result.p50_ms:.2f} ms ({result.failure or result.note or 'ok'})"
            )
            steps.advance()


def describe_method(seconds: float, names: Sequence[str], rounds: int) -> list[str]:
    """How the points were taken, so the report can be read without this source."""
    window = loadgen.perf_analyzer_window_ms(seconds)
    return [
        f"{rounds} round(s); each round starts, measures and stops conch and Triton one after the other, "
        "the order reversed every other round (conch first in odd rounds); every ratio pairs the two "
        "servers' figures of one round; before each server starts, up to "
        f"{QUIET_WAIT_S:g} s of waiting for the cores to be under {QUIET:.0%} busy (the figure it started "
        "with is under Machine)",
        f"the same files on both: `model.py` from `bench/peer_code/` (`triton_model.py`, `bls_model.py`), "
        f"`max_batch_size: {MAX_BATCH_SIZE}`, `dynamic_batching {{ max_queue_delay_microseconds: "
        f"{MAX_QUEUE_DELAY_US} }}`, one KIND_CPU instance per model (what a user sets on 2 cores); "
        "ONNX models: " + ", ".join(f"{name} {' -> '.join(map(str, MODELS[name]))}" for name in names),
        "conch: `conch serve` as checked out, its python models on the project's interpreter; Triton: "
        "`shared/tools/triton-server` (python backend stub on Python 3.11, `PYTHONPATH` = its venv's "
        "site-packages, where onnxruntime is)",
        f"load: `perf_analyzer -i {{http,grpc}} --concurrency-range C -p {window} -s 25 -r 6` (sync API, "
        "random input, HTTP with binary tensors); where no 3 windows in a row agree within 25 %, rerun "
        'with `-s 100 -r 3` and marked "unstable"; every request carries one row (batch 1)',
        f"{WARMUP_S:g} s of wrk at c={max(CONCURRENCIES)} warms each model before its points; raw ORT: "
        f"default SessionOptions, {seconds:g} s per batch size",
    ]


if __name__ == "__main__":
    sys.exit(main())
