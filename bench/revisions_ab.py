"""``python -m bench.revisions_ab --before REV --after REV``: conch at two git revisions, side by side.

What it measures: the request path's speed at two revisions of conch, in one run, on the same
machine, in alternating rounds. Each revision is served from its own detached git worktree
(``python -m conch.cli.main serve`` with the worktree as working directory and ``PYTHONPATH``, so
its ``conch`` package is the one imported); the harness and the load generators are this
checkout's. The points (``--points``, default all):

- ``bench.sweep``'s models ``tiny`` and ``mlp`` over HTTP JSON (wrk), HTTP binary tensors and gRPC
  (perf_analyzer), at 1 and 32 clients;
- ``tiny`` with ``--workers 2``, gRPC and HTTP binary at 32 clients;
- ``tiny`` with two frontend processes (``--proxies 2``, or ``--frontends 2`` at a revision whose
  ``serve --help`` has no ``--proxies``), gRPC and HTTP binary at 32 clients;
- ``bench.python_backend``'s ``tiny`` point: Triton's python-backend ``model.py``
  (``peer_code/triton_model.py``, ``tiny_python``), gRPC at 32 clients.

Each round starts both revisions' servers for each server mode, warms them, then takes every point
on one revision and at once on the other, the order alternating from point to point and from round
to round.

The rule for "no change in speed": the noise is the spread of the before revision's own rounds in
this run, its lowest and highest throughput of a point over its median. A point passes when the
median of its per-round after/before throughput ratios lies inside that band; the run passes when
every point does, and the report quotes the worst point (the lowest median ratio). Noise needs two
rounds of the baseline at least, so ``--rounds`` is 2 or more (``--quick``: 2 rounds of 2 s points).

Prints a line per measured point, writes the Markdown report and every round's raw figures (JSON)
to ``bench/results/<UTC date>-<time>-revisions-ab.{md,json}``, rewritten after every round so a run
cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import loadgen
from bench.models import MODELS, write_conch_repository, write_python_backend_repository
from bench.peers import serve_conch
from bench.python_backend import quiet_cores
from bench.report import MISSING, PairedRatio, Point, Row, bullets, markdown_table, paired_ratio
from bench.run import (
    add_round_arguments,
    choices,
    describe_machine,
    loadavg,
    round_order,
    settle_round_arguments,
    write_report,
)
from bench.servers import ServerError, ServerProcess, measure_between
from bench.sweep import point_load
from bench.sweep_report import PROTOCOLS

PROGRAM = "bench.revisions_ab"
REPOSITORY = Path(__file__).resolve().parents[1]
SIDES = ("before", "after")
WARMUP_S = 1.0
WARMUP_CLIENTS = 32
QUICK_ROUNDS = 2


@dataclass(frozen=True)
class ServerMode:
    """How a pair of servers is started: its processes, and the kind of model repository it serves."""

    key: str
    title: str
    workers: int = 1
    #: Frontend processes (``--proxies``, ``--frontends`` at older revisions); 0 for none.
    frontends: int = 0
    python_backend: bool = False
    #: Whether one process's statistics count every request (not so with ``--workers``), so that the
    #: server's CPU per request can be read.
    counts_every_request: bool = True


PLAIN = ServerMode("plain", "one process")
WORKERS = ServerMode("workers2", "`--workers 2`", workers=2, counts_every_request=False)
FRONTENDS = ServerMode("proxies2", "two frontend processes (`--proxies 2` / `--frontends 2`)", frontends=2)
PYTHON = ServerMode("python", "python-backend model", python_backend=True)
MODES = (PLAIN, WORKERS, FRONTENDS, PYTHON)


@dataclass(frozen=True)
class BenchPoint:
    """One measured point: the served ``model`` (whose input is the ``onnx`` model's), the protocol,
    the clients and the server mode."""

    model: str
    onnx: str
    protocol: str
    clients: int
    mode: ServerMode

    @property
    def name(self) -> str:
        """``model/protocol/clients``, with ``/mode`` for a mode other than one process."""
        suffix = "" if self.mode in (PLAIN, PYTHON) else f"/{self.mode.key}"
        return f"{self.model}/{self.protocol}/{self.clients}{suffix}"

    @property
    def key(self) -> tuple[str, int]:
        """Its cell in a :class:`bench.report.Row`."""
        return (self.model, self.clients)


def default_points() -> list[BenchPoint]:
    """The points measured when ``--points`` is not given, in the order they are measured."""
    points = [
        BenchPoint(model, model, protocol, clients, PLAIN)
        for model in ("tiny", "mlp")
        for protocol in PROTOCOLS
        for clients in (1, 32)
    ]
    points += [BenchPoint("tiny", "tiny", protocol, 32, WORKERS) for protocol in ("grpc", "http_binary")]
    points += [BenchPoint("tiny", "tiny", protocol, 32, FRONTENDS) for protocol in ("grpc", "http_binary")]
    return [*points, BenchPoint("tiny_python", "tiny", "grpc", 32, PYTHON)]


POINTS = {point.name: point for point in default_points()}


@dataclass(frozen=True)
class Revision:
    """One side of the comparison: the revision as asked, its commit, and the checkout it is served
    from, with the name of its frontend-processes flag."""

    side: str
    asked: str
    commit: str
    subject: str
    tree: Path
    frontends_flag: str

    @property
    def title(self) -> str:
        return f"{self.side} ({self.asked} = {self.commit})"

    @property
    def env(self) -> dict[str, str]:
        """The environment that makes a ``python`` started in :attr:`tree` import this ``conch``."""
        return {"PYTHONPATH": os.pathsep.join(filter(None, [str(self.tree), os.environ.get("PYTHONPATH")]))}


@dataclass(frozen=True)
class Verdict:
    """One point judged by the rule: the medians, the paired ratio and the before revision's band."""

    point: BenchPoint
    before: float | None
    after: float | None
    ratio: PairedRatio | None
    #: The before revision's lowest and highest throughput over its median.
    band: tuple[float, float] | None
    p50_ms: tuple[float | None, float | None]
    cpu_us: tuple[float | None, float | None]

    @property
    def place(self) -> str:
        """``inside``, ``below`` or ``above`` the band; ``not judged`` without a ratio or a band."""
        if self.ratio is None or self.band is None:
            return "not judged"
        if self.ratio.median < self.band[0]:
            return "below"
        return "above" if self.ratio.median > self.band[1] else "inside"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {PROGRAM}", description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD~1", help="the baseline: a git revision (default HEAD~1)")
    parser.add_argument(
        "--after",
        default="HEAD",
        help="the revision measured against it (default HEAD); a folder is served as it stands (the "
        "working tree, with its uncommitted changes)",
    )
    parser.add_argument(
        "--points", default=",".join(POINTS), help=f"comma-separated, of {','.join(POINTS)} (default all)"
    )
    add_round_arguments(parser)
    for action in parser._actions:
        if action.dest == "quick":
            action.help = f"{QUICK_ROUNDS} rounds of 2 s points; result file *.quick.md"
        if action.dest == "rounds":
            action.help = "rounds of alternating order, at least 2 (default 3)"
    args = parser.parse_args(argv)
    if args.quick and args.rounds is None:
        args.rounds = QUICK_ROUNDS
    args = settle_round_arguments(parser, args)
    if args.rounds < 2:
        parser.error("--rounds: the noise is the spread of the baseline's own rounds; it needs 2 at least")
    args.points = [POINTS[name] for name in choices(parser, "--points", args.points, POINTS)]
    return args


def git(*args: str, cwd: Path = REPOSITORY) -> str:
    """``git ARGS`` in ``cwd``, its output stripped; a failure ends the run with git's message."""
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{PROGRAM}: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checked_out(asked: dict[str, str], folder: Path) -> Iterator[dict[str, Revision]]:
    """Each side's revision in a detached worktree under ``folder`` (a folder asked for is used as it
    stands), checked to import its own ``conch``; the worktrees are removed on the way out."""
    made: list[Path] = []
    try:
        revisions = {}
        for side, name in asked.items():
            tree = Path(name).resolve() if Path(name).is_dir() else None
            if tree is None:
                tree = folder / f"tree-{side}"
                git(
                    "worktree",
                    "add",
                    "--detach",
                    str(tree),
                    git("rev-parse", "--verify", f"{name}^{{commit}}"),
                )
                made.append(tree)
            revisions[side] = describe_revision(side, name, tree)
        yield revisions
    finally:
        for tree in made:
            git("worktree", "remove", "--force", str(tree))


def describe_revision(side: str, asked: str, tree: Path) -> Revision:
    """The :class:`Revision` served from ``tree``, after checking that it imports its own ``conch``."""
    commit = git("rev-parse", "--short", "HEAD", cwd=tree)
    if git("status", "--porcelain", "--", "conch", cwd=tree):
        commit += " with uncommitted changes"
    subject = git("log", "-1", "--format=%s", cwd=tree)
    revision = Revision(side, asked, commit, subject[:100], tree, "")
    imported = run_revision_python(revision, "-c", "import conch; print(conch.__file__)").strip()
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{PROGRAM}: {revision.title} imports conch from {imported}, not from {tree}")
    return replace(revision, frontends_flag=frontends_flag(revision))


def run_revision_python(revision: Revision, *args: str) -> str:
    """The output of ``python ARGS`` run as the revision's servers run (its tree, its ``PYTHONPATH``)."""
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=revision.tree,
        env={**os.environ, **revision.env},
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"{PROGRAM}: {revision.title}: python {' '.join(args)}: {done.stderr.strip()[-500:]}"
        )
    return done.stdout


def frontends_flag(revision: Revision) -> str:
    """``--proxies`` where the revision's ``conch serve --help`` has it, else ``--frontends``."""
    help_text = run_revision_python(revision, "-m", "conch.cli.main", "serve", "--help")
    return "--proxies" if "--proxies" in help_text else "--frontends"


def write_repositories(folder: Path, points: Sequence[BenchPoint]) -> dict[tuple[str, str], Path]:
    """One model repository per (side, server mode) with the models of that mode's points: ONNX
    files served natively, or ``bench.python_backend``'s ``NAME_python`` models."""
    repositories = {}
    for mode in modes_of(points):
        onnx = sorted({point.onnx for point in points if point.mode == mode})
        for side in SIDES:
            root = folder / side / mode.key / "repo"
            if mode.python_backend:
                write_python_backend_repository(root, onnx, onnx_callee=False)
                for name in onnx:  # the BLS models are not measured here
                    shutil.rmtree(root / f"{name}_bls")
            else:
                write_conch_repository(root, onnx)
            repositories[side, mode.key] = root
    return repositories


def modes_of(points: Sequence[BenchPoint]) -> list[ServerMode]:
    """The server modes the points need, in :data:`MODES` order."""
    return [mode for mode in MODES if any(point.mode == mode for point in points)]


def serve_revision(revision: Revision, mode: ServerMode, repository: Path, workdir: Path) -> ServerProcess:
    """``conch serve`` of ``revision`` in ``mode`` on ``repository``, its log in ``workdir``."""
    extra = [f"{revision.frontends_flag}={mode.frontends}"] if mode.frontends else []
    server = serve_conch(repository, workdir, mode.workers, extra)
    return replace(server, name=f"conch {revision.side}", env=revision.env, cwd=revision.tree)


def run_mode_round(
    args: argparse.Namespace,
    mode: ServerMode,
    revisions: dict[str, Revision],
    repositories: dict[tuple[str, str], Path],
    rows: dict[tuple[str, str], Row],
    folder: Path,
    round_number: int,
) -> None:
    """Both revisions' servers of ``mode`` up; each model warmed on both; then every point of the mode
    on one revision and at once on the other, the order alternating from point to point."""
    points = [point for point in args.points if point.mode == mode]
    busy = quiet_cores()
    print(f" {mode.title}: cores {busy:.0%} busy with other jobs before the servers started", flush=True)
    with contextlib.ExitStack() as started:
        servers: dict[str, ServerProcess] = {}
        for side in round_order(SIDES, round_number):
            workdir = folder / side / mode.key
            server = serve_revision(revisions[side], mode, repositories[side, mode.key], workdir)
            try:
                servers[side] = started.enter_context(server)
            except (ServerError, OSError) as exc:
                print(f"  {revisions[side].title}: did not start: {exc}", file=sys.stderr, flush=True)
                fail_points(rows, side, points, f"did not start: {str(exc).splitlines()[0]}", round_number)
        bodies = {side: warm(server, points, folder / side / mode.key) for side, server in servers.items()}
        for number, point in enumerate(points):
            for side in round_order(SIDES, round_number + number):
                if side not in servers:
                    continue
                failure = bodies[side].get(point.onnx)
                if isinstance(failure, str):
                    fail_points(rows, side, [point], failure, round_number)
                    continue
                workdir = folder / side / mode.key
                measure_point(servers[side], point, rows[side, point.name], workdir, round_number, args)


def warm(server: ServerProcess, points: Sequence[BenchPoint], workdir: Path) -> dict[str, Path | str]:
    """For each ONNX model of ``points``: a sanity request, then ``WARMUP_S`` of perf_analyzer over
    gRPC on each model served from it; the JSON body's file, or why the sanity request failed."""
    bodies: dict[str, Path | str] = {}
    for onnx in sorted({point.onnx for point in points}):
        body = workdir / f"{onnx}.json"
        body.write_bytes(loadgen.infer_body(onnx))
        for model in sorted({point.model for point in points if point.onnx == onnx}):
            try:
                server.post_json(f"/v2/models/{model}/infer", body.read_bytes())
            except OSError as exc:
                bodies[onnx] = f"sanity request to {model}: {exc}"
                break
            target = loadgen.PerfTarget(model, server.ports.grpc_address, "grpc", MODELS[onnx][0])
            loadgen.perf_analyzer_point(target, WARMUP_CLIENTS, WARMUP_S, workdir)
        else:
            bodies[onnx] = body
    return bodies


def fail_points(
    rows: dict[tuple[str, str], Row], side: str, points: Sequence[BenchPoint], reason: str, round_number: int
) -> None:
    """Record ``points`` of ``side`` as failed in this round."""
    for point in points:
        rows[side, point.name].add(point.key, Point(loadgen.LoadResult.failed(reason)), round_number)
        print(f"  {point.name} {side}: failed: {reason}", flush=True)


def measure_point(
    server: ServerProcess,
    point: BenchPoint,
    row: Row,
    workdir: Path,
    round_number: int,
    args: argparse.Namespace,
) -> None:
    """One point on one server, recorded in ``row`` with the server's own times and CPU per request."""
    load = guarded(point_loader(server, point, workdir / f"{point.onnx}.json", args.seconds, workdir))
    result, times = measure_between(server, point.model, load)
    cpu = (times.server_cpu_us, times.children_cpu_us) if point.mode.counts_every_request else (None, None)
    row.add(point.key, Point(result, times.compute_ms, times.request_ms, *cpu), round_number)
    print(
        f"  {point.name} {row.peer}: {result.throughput:,.0f}/s p50 {result.p50_ms:.2f} ms "
        f"({result.failure or result.note or 'ok'})",
        flush=True,
    )


def point_loader(
    server: ServerProcess, point: BenchPoint, body: Path, seconds: float, workdir: Path
) -> Callable[[], loadgen.LoadResult]:
    """The sweep's load for a point of an ONNX model; perf_analyzer with the ONNX model's input width
    for a model served from another file (the python-backend one)."""
    if point.model == point.onnx:
        return point_load(server, point.model, point.protocol, point.clients, body, seconds, workdir)
    http = point.protocol == "http_binary"
    address = server.ports.http_address if http else server.ports.grpc_address
    target = loadgen.PerfTarget(point.model, address, "http" if http else "grpc", MODELS[point.onnx][0])
    return lambda: loadgen.perf_analyzer_point(target, point.clients, seconds, workdir)


def guarded(load: Callable[[], loadgen.LoadResult]) -> Callable[[], loadgen.LoadResult]:
    """``load``, with a load generator that cannot start (``wrk`` not installed, say) a failed point."""

    def run() -> loadgen.LoadResult:
        try:
            return load()
        except OSError as exc:
            return loadgen.LoadResult.failed(f"load generator: {exc}")

    return run


def judge(point: BenchPoint, before: Row, after: Row) -> Verdict:
    """A point's medians, its paired after/before ratio and the before revision's noise band."""
    rates = list(before.round_throughputs(point.key).values())
    band = None
    if len(rates) > 1:
        middle = statistics.median(rates)
        band = (min(rates) / middle, max(rates) / middle)
    return Verdict(
        point,
        _median(rates),
        _median(after.round_throughputs(point.key).values()),
        paired_ratio(after, before, point.key),
        band,
        (
            _median(before.round_values(point.key, "p50_ms").values()),
            _median(after.round_values(point.key, "p50_ms").values()),
        ),
        (cpu_median(before, point.key), cpu_median(after, point.key)),
    )


def cpu_median(row: Row, key: tuple[str, int]) -> float | None:
    """The median over the rounds of the server's CPU microseconds per request, its own and its
    children's (frontend and model processes); None where the server's figures were not read."""
    return _median(
        point.server_cpu_us + (point.children_cpu_us or 0.0)
        for point in row.rounds.get(key, {}).values()
        if point.load.ok and point.server_cpu_us is not None
    )


def _median(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def worst(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The point with the lowest median after/before ratio."""
    judged = [verdict for verdict in verdicts if verdict.ratio is not None]
    return min(judged, key=lambda verdict: verdict.ratio.median if verdict.ratio else 0.0, default=None)


def conclusion(verdicts: Sequence[Verdict]) -> str:
    """The run's verdict in two sentences: the worst point, and whether every point is in its band."""
    lowest = worst(verdicts)
    if lowest is None:
        return "No point was measured on both revisions: nothing to judge."
    outside = [f"{v.point.name} ({v.place})" for v in verdicts if v.place != "inside"]
    every = "yes" if not outside else f"no; outside or not judged: {', '.join(outside)}"
    band = (
        f"the before revision's own spread {band_text(lowest.band)}"
        if lowest.band is not None
        else "no noise band (under 2 successful rounds of the before revision)"
    )
    return (
        f"**Worst point: {lowest.point.name}**, after/before {ratio_text(lowest.ratio)}, {band}: "
        f"{lowest.place}. **Every point inside its band: {every}.**"
    )


def ratio_text(ratio: PairedRatio | None) -> str:
    if ratio is None:
        return MISSING
    return f"{ratio.median:.3f} [{ratio.low:.3f}-{ratio.high:.3f}]"


def band_text(band: tuple[float, float] | None) -> str:
    return MISSING if band is None else f"[{band[0]:.3f}-{band[1]:.3f}]"


def _figure(value: float | None, digits: int = 0) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def _pair(values: tuple[float | None, float | None], digits: int) -> str:
    return f"{_figure(values[0], digits)} / {_figure(values[1], digits)}"


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """One line per point: medians, the paired ratio, the band and where the ratio lies."""
    header = ["point", "before /s", "after /s", "after/before, median [lowest-highest] of the rounds"]
    header += ["before's noise band", "median ratio", "p50 ms before / after", "server CPU us/request"]
    lines = [
        [
            f"`{v.point.name}`",
            _figure(v.before),
            _figure(v.after),
            ratio_text(v.ratio),
            band_text(v.band),
            v.place,
            _pair(v.p50_ms, 3),
            _pair(v.cpu_us, 1),
        ]
        for v in verdicts
    ]
    return markdown_table(header, lines)


def rounds_table(points: Sequence[BenchPoint], rows: dict[tuple[str, str], Row], rounds: int) -> str:
    """Every round's throughput of every point on each revision (failures and notes spelled out)."""
    header = ["point", "revision", *(f"round {n}" for n in range(1, rounds + 1))]
    lines = []
    for point in points:
        for side in SIDES:
            measured = rows[side, point.name].rounds.get(point.key, {})
            cells = [_round_cell(measured.get(n)) for n in range(1, rounds + 1)]
            lines.append([f"`{point.name}`", side, *cells])
    return markdown_table(header, lines)


def _round_cell(point: Point | None) -> str:
    if point is None:
        return MISSING
    if not point.load.ok:
        return f"failed: {point.load.failure}"
    text = f"{point.load.throughput:,.0f}"
    return f"{text} ({point.load.note})" if point.load.note else text


def describe_revisions(revisions: dict[str, Revision]) -> list[str]:
    return [
        f"{r.side}: `{r.asked}` = {r.commit} ({r.subject}); served from `{r.tree}`; frontend processes "
        f"flag `{r.frontends_flag}`"
        for r in revisions.values()
    ]


def describe_method(args: argparse.Namespace) -> list[str]:
    """How the points were taken, so the report reads without this source."""
    window = loadgen.perf_analyzer_window_ms(args.seconds)
    return [
        f"{args.rounds} rounds of {args.seconds:g} s points; each round starts both revisions' servers "
        "of each server mode (the start order reversed every other round), warms each model on both "
        f"({WARMUP_S:g} s of perf_analyzer over gRPC at {WARMUP_CLIENTS} clients after a sanity "
        "request), then takes every point on one revision and at once on the other (the idle one "
        "waits), the order alternating from point to point and from round to round",
        "each revision runs `python -m conch.cli.main serve` (this venv's interpreter) with its detached "
        "git worktree as working directory and `PYTHONPATH`, checked to import that `conch`; harness, "
        "models and load generators are this checkout's",
        "models as `bench.sweep` builds them (FP32 Gemm+Relu MLPs, `max_batch_size: 64`, 500 us of "
        "dynamic batching delay, one KIND_CPU instance); the python-backend point serves "
        "`bench/peer_code/triton_model.py` as `bench.python_backend` does",
        f"HTTP JSON: `wrk -t1 -cC -d{max(1, round(args.seconds))}s`; HTTP binary and gRPC: `perf_analyzer "
        f"-i {{http,grpc}} --concurrency-range C -p {window} -s 25 -r 6`, rerun with `-s 100 -r 3` and "
        'marked "unstable" where no 3 windows agree within 25 %; batch 1 per request',
        "the rule: a point's noise band is the before revision's lowest and highest throughput over its "
        "median, from its own rounds in this run; the point passes when the median of its per-round "
        "after/before throughput ratios lies inside it; the worst point is the lowest median ratio",
        "server CPU per request: utime+stime of the server process and its children (`/proc`) over the "
        "requests its statistics counted; not given with `--workers 2`, whose statistics are one "
        "worker's",
    ]


def render(
    args: argparse.Namespace,
    started: datetime,
    revisions: dict[str, Revision],
    rows: dict[tuple[str, str], Row],
    machine: list[str],
    rounds_done: int,
) -> str:
    """The whole report as Markdown."""
    verdicts = [judge(p, rows["before", p.name], rows["after", p.name]) for p in args.points]
    before, after = revisions["before"], revisions["after"]
    done = "" if rounds_done == args.rounds else f" (cut short: {rounds_done} of {args.rounds} rounds)"
    sections = [
        f"# conch at two revisions: {before.asked} against {after.asked}, {started:%Y-%m-%d %H:%M} UTC{done}",
        conclusion(verdicts),
        "## Points\n\n" + verdict_table(verdicts),
        "## Revisions\n\n" + bullets(describe_revisions(revisions)),
        "## Rounds, inferences per second\n\n" + rounds_table(args.points, rows, args.rounds),
        "## How\n\n" + bullets(describe_method(args)),
        "## Machine\n\n" + bullets(machine),
    ]
    return "\n\n".join(sections) + "\n"


def raw_data(
    args: argparse.Namespace,
    started: datetime,
    revisions: dict[str, Revision],
    rows: dict[tuple[str, str], Row],
    rounds_done: int,
) -> dict[str, object]:
    """Every round's figures of every point on each revision, and each point's verdict, as JSON."""
    points = []
    for point in args.points:
        verdict = judge(point, rows["before", point.name], rows["after", point.name])
        measured = {
            side: [
                {
                    "round": n,
                    **asdict(p.load),
                    "server_cpu_us": p.server_cpu_us,
                    "children_cpu_us": p.children_cpu_us,
                }
                for n, p in sorted(rows[side, point.name].rounds.get(point.key, {}).items())
            ]
            for side in SIDES
        }
        summary = {
            "before": verdict.before,
            "after": verdict.after,
            "ratio": None if verdict.ratio is None else asdict(verdict.ratio),
            "band": verdict.band,
            "place": verdict.place,
            "p50_ms": verdict.p50_ms,
            "cpu_us": verdict.cpu_us,
        }
        points.append({"name": point.name, "mode": point.mode.key, "rounds": measured, "verdict": summary})
    return {
        "started": started.isoformat(),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "rounds_done": rounds_done,
        "revisions": {side: {**asdict(r), "tree": str(r.tree)} for side, r in revisions.items()},
        "points": points,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    stem = started.strftime("%Y-%m-%d-%H%M%S") + "-revisions-ab"
    report_name = stem + (".quick.md" if args.quick else ".md")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    # describe_machine's "conch: commit ..." is this checkout's, which runs the harness only.
    machine = [line.replace("conch: ", "the harness's checkout: ", 1) for line in describe_machine()]
    rows = {(side, p.name): Row(side, side, p.protocol) for side in SIDES for p in args.points}
    with tempfile.TemporaryDirectory(prefix="conch-bench-revisions-") as scratch:
        folder = Path(scratch)
        with checked_out({"before": args.before, "after": args.after}, folder) as revisions:
            for revision in revisions.values():
                print(
                    f"{PROGRAM}: {revision.title}, frontend processes flag {revision.frontends_flag}",
                    flush=True,
                )
            print(
                f"{PROGRAM}: {len(args.points)} point(s), {args.rounds} rounds of {args.seconds:g} s points",
                flush=True,
            )
            repositories = write_repositories(folder / "servers", args.points)
            for round_number in range(1, args.rounds + 1):
                print(f"round {round_number} of {args.rounds}", flush=True)
                for mode in modes_of(args.points):
                    run_mode_round(
                        args, mode, revisions, repositories, rows, folder / "servers", round_number
                    )
                data = raw_data(args, started, revisions, rows, round_number)
                (args.results_dir / (stem + ".json")).write_text(json.dumps(data, indent=1))
                text = render(args, started, revisions, rows, machine, round_number)
                (args.results_dir / report_name).write_text(text)
    machine.append(f"load average at the end: {loadavg()}")
    write_report(
        render(args, started, revisions, rows, machine, args.rounds), args.results_dir, report_name, PROGRAM
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
