"""``python -m bench.run``: conch against Triton, MLServer and a naive server, in one run, one at a time.

For each selected model: raw ONNX Runtime in this process first, then rounds (3, 1 with ``--quick``): in
each round every server in turn (started, measured, stopped; never two at once) at concurrency 1 and 32
over HTTP JSON (wrk) and, where the server has it, gRPC (perf_analyzer). The rounds alternate the order
of the servers (forwards, then backwards), so no server is always measured first or last, and each
conch/peer ratio is the median of the ratios within a round. Prints the Markdown report and writes it
to ``bench/results/<UTC date>-<time>.md`` (``.quick.md`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import onnxruntime as ort

from bench import loadgen, ort_limit, report
from bench.models import DEFAULT_MODELS, MAX_BATCH_SIZE, MAX_QUEUE_DELAY_US, MODELS
from bench.peers import CACHE, PEERS, Peer, PeerUnavailable, package_versions
from bench.report import CONCURRENCIES, BenchResults, Point, Row
from bench.servers import ServerError, ServerProcess, measure_between
from conch.cli.progress import Steps, stdout_console

RESULTS = Path(__file__).parent / "results"
WARMUP_S = 1.0
DEFAULT_ROUNDS = 3
LOGS = CACHE / "logs"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    parser.add_argument("--only", default=",".join(PEERS), help=f"servers to run (default {','.join(PEERS)})")
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"models (default {','.join(DEFAULT_MODELS)}; of {','.join(MODELS)})",
    )
    args = parser.parse_args(argv)
    args.only = choices(parser, "--only", args.only, PEERS)
    args.models = choices(parser, "--models", args.models, MODELS)
    return settle_round_arguments(parser, args)


def add_round_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seconds``, ``--quick``, ``--rounds`` and ``--results-dir``, as every benchmark of rounds
    takes them."""
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each point (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 s per point, 1 round; result file *.quick.md")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="run every server N times, in rounds of alternating order; each ratio is the median of the "
        "per-round ratios (default 3, 1 with --quick)",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help="where the report is written")


def settle_round_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``--quick`` means 2 s points and one round; rounds default to 3 and must be at least 1."""
    if args.quick:
        args.seconds = 2.0
    if args.rounds is None:
        args.rounds = 1 if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def choices(parser: argparse.ArgumentParser, flag: str, value: str, known: Collection[str]) -> list[str]:
    """The comma-separated items of ``value``, in ``known``'s order; an unknown one is a usage error."""
    chosen = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in known]
    if unknown or not chosen:
        parser.error(f"{flag}: unknown {unknown or 'empty'}; choose from {', '.join(known)}")
    return [item for item in known if item in chosen]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    results = BenchResults(
        started=started.strftime("%Y-%m-%d %H:%M UTC"),
        machine=describe_machine(),
        method=describe_method(args.seconds, args.models, args.rounds),
        models=args.models,
    )
    print(
        f"bench: {', '.join(args.only)} on {', '.join(args.models)}, {args.seconds:g} s per point", flush=True
    )
    rows = {
        key: [Row(key, PEERS[key].title, protocol) for protocol in PEERS[key].protocols] for key in args.only
    }
    results.rows += [row for key in args.only for row in rows[key]]
    points = args.rounds * len(results.rows) * len(args.models) * len(CONCURRENCIES)
    # On a terminal a bar counts the points (and the raw ORT runs); otherwise the lines below are all.
    with Steps(len(args.models) + points, label="bench", console=stdout_console()) as steps:
        for model in args.models:
            steps.step(f"raw ORT {model}", plain=False)
            results.ort[model] = ort_limit.measure_model(model, args.seconds)
            rates = ", ".join(f"b{b} {r.throughput:,.0f}/s" for b, r in results.ort[model].items())
            steps.note(f"  raw ORT {model}: {rates}")
            steps.advance()
        with tempfile.TemporaryDirectory(prefix="conch-bench-") as folder:
            for round_number in range(1, args.rounds + 1):
                if args.rounds > 1:
                    steps.note(f"round {round_number} of {args.rounds}")
                for key in round_order(args.only, round_number):
                    run_peer(
                        PEERS[key],
                        rows[key],
                        Path(folder) / key,
                        args.models,
                        args.seconds,
                        results,
                        round_number,
                        steps,
                    )
    results.machine.append(f"load average at the end: {loadavg()}")
    text = report.render(results)
    print("\n" + text)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".quick.md" if args.quick else ".md"
    path = args.results_dir / (started.strftime("%Y-%m-%d-%H%M%S") + suffix)
    path.write_text(text)
    print(f"bench: written to {path}")
    return 0


def write_report(text: str, results_dir: Path, name: str, program: str) -> Path:
    """Print the report, write it as ``results_dir/name`` and say where."""
    print("\n" + text)
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / name
    path.write_text(text)
    print(f"{program}: written to {path}", flush=True)
    return path


def round_order(servers: Sequence[str], round_number: int) -> list[str]:
    """The servers in the order of ``round_number``: as given in odd rounds, reversed in even ones, so
    over the rounds each server follows and precedes the others as often."""
    return list(servers) if round_number % 2 else list(reversed(servers))


def run_peer(
    peer: Peer,
    rows: list[Row],
    workdir: Path,
    models: list[str],
    seconds: float,
    results: BenchResults,
    round_number: int = 1,
    steps: Steps | None = None,
) -> None:
    """Install, start, measure and stop one server; failures become row notes, never exceptions.

    The server's versions and the machine's load go into the report in the first round only.
    """
    steps = steps or Steps(console=stdout_console())
    busy = f"cores {other_load():.0%} busy with other jobs just before it started"
    steps.note(f"{peer.key}: {busy}")
    steps.step(f"{peer.key}: starting", plain=False)
    try:
        server = peer.build(workdir, models)
        with server:
            if round_number == 1:
                results.machine.append(
                    f"{peer.title}: {server_metadata(server)}; "
                    f"{package_versions(peer.python(), peer.packages)}; {busy}"
                )
            for model in models:
                measure_model(server, model, rows, workdir, seconds, round_number, steps)
    except PeerUnavailable as exc:
        _note(rows, str(exc), steps)
    except ServerError as exc:
        _note(rows, f"did not start: {str(exc).splitlines()[0]}", steps)
        print(str(exc), file=sys.stderr)
    except OSError as exc:
        _note(rows, f"failed: {exc}", steps)
    finally:
        keep_log(workdir / f"{peer.key}.log")


def server_metadata(server: ServerProcess) -> str:
    """Name and version from V2 ``GET /v2`` (the naive server has none)."""
    try:
        about = server.get_json("/v2")
    except OSError:
        return "no `/v2` metadata"
    return f"`/v2` says {about.get('name', '?')} {about.get('version', '?')}"


def keep_log(log: Path) -> None:
    """Copy a server's log to ``LOGS`` so it outlives the run's temporary folder."""
    if log.exists():
        LOGS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, LOGS / log.name)


def measure_model(
    server: ServerProcess,
    model: str,
    rows: list[Row],
    workdir: Path,
    seconds: float,
    round_number: int = 1,
    steps: Steps | None = None,
) -> None:
    """Every (protocol, concurrency) point of ``model`` on a running server, after a sanity request,
    recorded as round ``round_number``'s."""
    steps = steps or Steps(console=stdout_console())
    body = workdir / f"{model}.json"
    body.write_bytes(loadgen.infer_body(model))
    try:
        server.post_json(f"/v2/models/{model}/infer", body.read_bytes())
    except OSError as exc:
        for row in rows:
            for concurrency in CONCURRENCIES:
                failed = Point(loadgen.LoadResult.failed(f"sanity request: {exc}"))
                row.add((model, concurrency), failed, round_number)
        steps.advance(len(rows) * len(CONCURRENCIES))
        return
    loadgen.run_wrk(_infer_url(server, model), body, max(CONCURRENCIES), WARMUP_S, workdir)
    for row in rows:
        for concurrency in CONCURRENCIES:
            steps.step(f"{row.server} {model} {row.protocol} c={concurrency}", plain=False)
            load = partial(run_point, server, model, row.protocol, concurrency, body, seconds, workdir)
            result, times = measure_between(server, model, load)
            row.add((model, concurrency), Point(result, times.compute_ms, times.request_ms), round_number)
            status = result.failure or result.note or "ok"
            steps.note(
                f"  {model} {row.protocol} c={concurrency}: {result.throughput:,.0f}/s "
                f"p50 {result.p50_ms:.2f} ms p99 {result.p99_ms:.2f} ms ({status})"
            )
            steps.advance()


def run_point(
    server: ServerProcess,
    model: str,
    protocol: str,
    concurrency: int,
    body: Path,
    seconds: float,
    workdir: Path,
) -> loadgen.LoadResult:
    """One point: wrk for ``http``, perf_analyzer for ``grpc``."""
    if protocol == "http":
        return loadgen.run_wrk(_infer_url(server, model), body, concurrency, seconds, workdir)
    return loadgen.run_perf_analyzer(model, server.ports.grpc_address, concurrency, seconds, workdir)


def _infer_url(server: ServerProcess, model: str) -> str:
    return f"{server.ports.http_url}/v2/models/{model}/infer"


def _note(rows: list[Row], note: str, steps: Steps) -> None:
    steps.note(f"  {note}")
    for row in rows:
        row.note = note


def describe_machine() -> list[str]:
    """CPU count and model, memory, interpreter and ONNX Runtime versions, conch's commit, machine load."""
    cpu = _field(_read("/proc/cpuinfo"), "model name") or platform.processor() or "unknown"
    mem_kb = int((_field(_read("/proc/meminfo"), "MemTotal") or "0").split()[0])
    return [
        f"nproc: {os.cpu_count()}; CPU: {cpu}; memory: {mem_kb / 2**20:.1f} GiB",
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}; "
        f"onnxruntime {ort.__version__} (harness and raw ORT)",
        f"conch: {conch_revision()}",
        f"load average at the start: {loadavg()} (well above 0 would mean another job shares the cores)",
    ]


def describe_method(seconds: float, models: Sequence[str], rounds: int = 1) -> list[str]:
    """How the points were taken, so the table can be read without this source."""
    repeated = (
        [
            f"{rounds} rounds: every server measured once per round, the order reversed every other round; "
            "each throughput cell is the round with the median throughput, the lowest and highest round in "
            "brackets; each ratio is the median of the per-round ratios (conch and the peer measured in "
            "the same round), the lowest and highest of them in brackets"
        ]
        if rounds > 1
        else ["1 round: each ratio divides two single measurements, and is worth less than a median of 3"]
    )
    return [
        *repeated,
        f"one server at a time on 127.0.0.1, the load generator on the same {os.cpu_count()} cores",
        "every request carries one row (batch 1) of fixed random FP32 values; models: "
        + ", ".join(f"{name} {' -> '.join(map(str, MODELS[name]))}" for name in models),
        f"batching everywhere: at most {MAX_BATCH_SIZE} requests, {MAX_QUEUE_DELAY_US} us queue delay, "
        "one model instance",
        f"HTTP JSON: `wrk -t1 -cC -d{max(1, round(seconds))}s --latency` POSTing a V2 JSON body; "
        "non-2xx answers or socket errors fail the point",
        f"gRPC: `perf_analyzer -i grpc --concurrency-range C -p {loadgen.perf_analyzer_window_ms(seconds)} "
        "-s 25 -r 6` (sync API, random input); where no 3 windows in a row agree within 25 %, it is rerun "
        'with `-s 100 -r 3` and the point marked "unstable"',
        f"{WARMUP_S:g} s of wrk at c={max(CONCURRENCIES)} warms each model before its points; raw ORT: "
        f"default SessionOptions, {seconds:g} s per batch size",
    ]


def conch_revision() -> str:
    """``commit abc1234``, with `` with uncommitted changes`` where ``conch/`` differs from it."""
    dirty = " with uncommitted changes" if _git("status", "--porcelain", "conch") else ""
    return f"commit {_git('rev-parse', '--short', 'HEAD') or 'unknown'}{dirty}"


def other_load(seconds: float = 1.0) -> float:
    """How busy the cores are (0 to 1) over ``seconds`` while the harness runs nothing: other jobs' load."""

    def sample() -> tuple[int, int]:
        fields = [int(value) for value in _read("/proc/stat").split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    total_before, idle_before = sample()
    time.sleep(seconds)
    total_after, idle_after = sample()
    elapsed = total_after - total_before
    return 1 - (idle_after - idle_before) / elapsed if elapsed > 0 else 0.0


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _field(text: str, name: str) -> str | None:
    """The value of the first ``name: value`` line of a /proc file."""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name)), None)


def loadavg() -> str:
    return " ".join(_read("/proc/loadavg").split()[:3]) or "unknown"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    except OSError:
        return ""
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
