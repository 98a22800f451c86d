"""``python -m bench.scaling``: conch's throughput with its processes pinned to 1 core against more.

Why: every request's protocol work (HTTP parsing, JSON and protobuf, gRPC's per-call cost) runs on the
event loop of the process that owns the connection. Whether conch gets faster with more cores is the
question a user sizing a pod asks. The server (and every process it starts) runs under ``taskset -c``
on the first N cores, for each N of ``--cores``, with one process (``--workers 1``), with one per
core (``--workers N``, a full copy of the server per process sharing the ports), and with frontend
processes (``--proxies N-1`` and ``--proxies N``: protocol work in N processes, one model process
behind them); the load is the same for every configuration. The load generator is not pinned: on a
machine with as many cores as the largest N it shares them with the server, so the figures are
indicative there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench import loadgen
from bench.models import MODELS, write_conch_repository
from bench.peers import serve_conch
from bench.run import RESULTS, conch_revision, describe_machine, keep_log, loadavg, write_report
from bench.servers import ServerError, ServerProcess
from bench.sweep import point_load

PROTOCOLS = ("http_json", "http_binary", "grpc")


@dataclass(frozen=True)
class Setup:
    """One configuration: the cores the server may use and its number of processes."""

    cores: int
    workers: int
    proxies: int = 0

    @property
    def name(self) -> str:
        cores = f"{self.cores} core" + ("s" if self.cores > 1 else "")
        if self.proxies:
            return f"{cores}, {self.proxies} " + ("proxies" if self.proxies > 1 else "proxy")
        return f"{cores}, {self.workers} worker" + ("s" if self.workers > 1 else "")


KINDS = ("one", "workers", "proxies-1", "proxies")
"""Per core count above one: one process, one per core (``--workers N``), and ``--proxies N-1``
and ``N`` (N-1 leaves the model process a core of its own)."""


def setups(cores: Sequence[int], kinds: Sequence[str] = KINDS) -> list[Setup]:
    """One process on the fewest cores (every ratio's reference), then ``kinds`` for each larger count."""
    found = [Setup(cores[0], 1)]
    for n in cores[1:]:
        made = {
            "one": Setup(n, 1),
            "workers": Setup(n, n),
            "proxies-1": Setup(n, 1, n - 1),
            "proxies": Setup(n, 1, n),
        }
        found += [made[kind] for kind in kinds if made[kind] not in found]
    return found


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    available = len(os.sched_getaffinity(0))
    parser.add_argument(
        "--cores", default=",".join(str(n) for n in (1, 2, 4, 8, 16) if n <= available), help="core counts"
    )
    parser.add_argument("--model", default="tiny", choices=list(MODELS))
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"setups per core count, from {','.join(KINDS)}"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no round that the rounds so far say would end past this many seconds (0: no limit)",
    )
    parser.add_argument(
        "--wrk-threads",
        type=int,
        default=max(1, available // 4),
        help="wrk threads for HTTP JSON (default: a quarter of the cores, so one wrk thread caps nothing)",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if not args.kinds or any(kind not in KINDS for kind in args.kinds):
        parser.error(f"--kinds: a comma-separated list from {','.join(KINDS)}")
    if args.wrk_threads < 1:
        parser.error("--wrk-threads must be at least 1")
    try:
        args.cores = sorted({int(n) for n in args.cores.split(",") if n.strip()})
    except ValueError:
        parser.error("--cores: expected integers like 1,2")
    if not args.cores or min(args.cores) < 1 or max(args.cores) > available:
        parser.error(f"--cores: each count from 1 to the {available} cores this process may use")
    if args.rounds < 1 or args.clients < 1:
        parser.error("--rounds and --clients must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    machine = describe_machine()
    cpus = sorted(os.sched_getaffinity(0))
    machine.append(pinning_check(cpus))
    rates: dict[tuple[Setup, str], list[float]] = {}
    plan = setups(args.cores, args.kinds)
    with tempfile.TemporaryDirectory(prefix="conch-bench-scaling-") as folder:
        repository = write_conch_repository(Path(folder) / "repo", [args.model])
        body = Path(folder) / "body.json"
        body.write_bytes(loadgen.infer_body(args.model))
        begun = time.monotonic()
        for number in range(1, args.rounds + 1):
            spent = time.monotonic() - begun
            if number > 1 and args.budget_s and spent + spent / (number - 1) > args.budget_s:
                print(f"stopping after {number - 1} round(s): another would pass --budget-s", flush=True)
                args.rounds = number - 1
                break
            for setup in plan if number % 2 else list(reversed(plan)):
                workdir = Path(folder) / f"{setup.cores}-{setup.workers}-{setup.proxies}"
                pinned = ",".join(map(str, cpus[: setup.cores]))
                extra = [f"--proxies={setup.proxies}"] if setup.proxies else []
                server = serve_conch(repository, workdir, workers=setup.workers, extra=extra)
                server.command = ["taskset", "-c", pinned, *server.command]
                try:
                    with server:
                        measure_setup(server, setup, number, args, body, workdir, rates)
                except (ServerError, OSError) as exc:
                    print(f"{setup.name}: {str(exc).splitlines()[0]}", file=sys.stderr)
                finally:
                    keep_log(workdir / "conch.log")
    machine.append(f"load average at the end: {loadavg()}")
    name = started.strftime("%Y-%m-%d-%H%M%S") + "-scaling.md"
    write_report(render(rates, plan, args, started, machine), args.results_dir, name, "bench.scaling")
    return 0


_BURN = """\
import time
wall, cpu = time.perf_counter(), time.process_time()
n = 0
for i in range(8_000_000):
    n += i
print((time.perf_counter() - wall) / (time.process_time() - cpu))
"""


def pinning_check(cpus: Sequence[int]) -> str:
    """Whether ``taskset`` really confines: two busy processes pinned to one core share it, so each
    takes about twice its CPU time in wall time. Some sandboxes accept an affinity and ignore it; then
    every "N cores" figure is really "all cores", and the report says so."""
    if len(cpus) < 2:
        return "taskset: not checked (one core)"
    burner = ["taskset", "-c", str(cpus[0]), sys.executable, "-c", _BURN]
    running = [subprocess.Popen(burner, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    stretch = statistics.mean(float(process.communicate()[0]) for process in running)
    verdict = "holds" if stretch >= 1.5 else "DOES NOT HOLD: the N-core setups are not confined"
    return f"taskset {verdict} (two busy processes pinned to one core ran {stretch:.2f}x their CPU time)"


def measure_setup(
    server: ServerProcess,
    setup: Setup,
    number: int,
    args: argparse.Namespace,
    body: Path,
    workdir: Path,
    rates: dict[tuple[Setup, str], list[float]],
) -> None:
    """A sanity request, then one point per protocol at ``args.clients``; a failed point counts 0."""
    server.post_json(f"/v2/models/{args.model}/infer", body.read_bytes())
    for protocol in PROTOCOLS:
        load = point_load(
            server, args.model, protocol, args.clients, body, args.seconds, workdir, args.wrk_threads
        )
        result = load()
        rates.setdefault((setup, protocol), []).append(result.throughput if result.ok else 0.0)
        status = result.failure or result.note or "ok"
        print(f"round {number}, {setup.name}, {protocol}: {result.throughput:,.0f}/s ({status})", flush=True)


def render(
    rates: dict[tuple[Setup, str], list[float]],
    plan: Sequence[Setup],
    args: argparse.Namespace,
    started: datetime,
    machine: Sequence[str],
) -> str:
    """Median throughput per setup and protocol, and its ratio to one core, one process."""
    base = plan[0]
    lines = [
        f"# conch on 1 core against more, {started.strftime('%Y-%m-%d %H:%M UTC')}\n",
        f"`{args.model}` at {args.clients} clients; median of {args.rounds} round(s) [lowest-highest]; "
        f"ratio to {base.name}.\n",
        "| setup | " + " | ".join(PROTOCOLS) + " |",
        "|---|" + "---|" * len(PROTOCOLS),
    ]
    for setup in plan:
        cells = []
        for protocol in PROTOCOLS:
            found = rates.get((setup, protocol), [])
            reference = rates.get((base, protocol), [])
            if not found or not reference or statistics.median(reference) <= 0:
                cells.append("-")
                continue
            ratio = statistics.median(found) / statistics.median(reference)
            cells.append(
                f"{statistics.median(found):,.0f}/s [{min(found):,.0f}-{max(found):,.0f}], {ratio:.2f}x"
            )
        lines.append(f"| {setup.name} | " + " | ".join(cells) + " |")
    lines += [
        "\n## Machine\n",
        *(f"- {line}" for line in machine),
        f"- conch {conch_revision()}",
        "\n## Method\n",
        "- the server and its children under `taskset -c` on the first N cores; the load generators "
        "(wrk for HTTP JSON, perf_analyzer for HTTP binary and gRPC) unpinned, sharing the cores",
        f"- wrk with {args.wrk_threads} thread(s); perf_analyzer in its default synchronous mode",
        "- rounds alternate the order of the setups",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
