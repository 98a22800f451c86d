"""``python -m bench.stability``: does ``perf_analyzer``, with its default stability settings, get a
stable measurement of conch on every run, and how much do its windows swing, against Triton?

Why: perf_analyzer is the tool Triton's users measure with. It repeats measurement windows (5 s by
default) until three in a row agree within 10 % on throughput and latency, and gives up after 10
("Failed to obtain stable measurement"). A server whose rate oscillates between windows cannot be
measured by its users, and the oscillation is latency jitter its clients feel.

Each run is one perf_analyzer invocation with nothing but the model, the address, the protocol, the
concurrency and the input shape (``-v`` prints every window). The default plan is 10 runs at each of
concurrency 1, 4, 8 and 32 over gRPC and HTTP (80 runs per server), servers alternating run by run.
The report counts stable runs and gives the coefficient of variation (standard deviation over mean)
of the window throughputs: per run over all its windows, and its median and worst over the runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.cost_per_second import Contrast, Second, median_contrast, sample_seconds, slow_against_fast
from bench.loadgen import PERF_ANALYZER
from bench.models import MODELS, write_conch_repository, write_triton_repository
from bench.peers import PeerUnavailable, serve_conch, serve_triton
from bench.run import (
    RESULTS,
    choices,
    conch_revision,
    describe_machine,
    keep_log,
    loadavg,
    round_order,
    write_report,
)
from bench.servers import ServerError, ServerProcess

SERVERS = {"conch": (write_conch_repository, serve_conch), "triton": (write_triton_repository, serve_triton)}
#: The server key of ``--variant-args``: conch again, with other flags, taking its turn beside the rest.
VARIANT = "conch-variant"


def kind(key: str) -> str:
    """The server a key runs: the variant is conch, with its own flags."""
    return "conch" if key == VARIANT else key


PROTOCOLS = ("grpc", "http")
#: A perf_analyzer run still going after this long is killed and counted unstable.
RUN_TIMEOUT_S = 600
CONCURRENCIES = (1, 4, 8, 32)
_PASS = re.compile(r"Pass \[(\d+)\] throughput: ([\d.]+) infer/sec\. Avg latency: (\d+) usec")


@dataclass
class Run:
    """One perf_analyzer invocation: whether it reported a stable measurement, and its windows."""

    server: str
    protocol: str
    concurrency: int
    stable: bool
    windows: list[float] = field(default_factory=list)
    latencies_us: list[float] = field(default_factory=list)
    failure: str | None = None
    #: The share of the machine's CPU time its hypervisor took during the run (``steal`` in
    #: ``/proc/stat``): a virtual machine's noise that no server can remove; None where unknown.
    steal: float | None = None
    #: Each second's rate and CPU per request, server and client (:mod:`bench.cost_per_second`).
    seconds: list[Second] = field(default_factory=list)

    @property
    def cv(self) -> float | None:
        """Coefficient of variation of the window throughputs (None with fewer than two windows)."""
        if len(self.windows) < 2 or statistics.fmean(self.windows) <= 0:
            return None
        return statistics.pstdev(self.windows) / statistics.fmean(self.windows)


def parse_passes(output: str) -> tuple[list[float], list[float]]:
    """Every window's throughput and average latency from ``perf_analyzer -v`` output."""
    found = _PASS.findall(output)
    return [float(rate) for _, rate, _ in found], [float(latency) for _, _, latency in found]


def run_once(
    key: str, server: ServerProcess, protocol: str, concurrency: int, model: str, extra: Sequence[str]
) -> Run:
    """perf_analyzer with its defaults against ``model`` on ``server``; ``extra`` adds flags (none by
    default: the point is the default settings). Each second's cost is sampled meanwhile."""
    address = server.ports.grpc_address if protocol == "grpc" else server.ports.http_address
    command = [str(PERF_ANALYZER), "-m", model, "-u", address, "-i", protocol, "-v"]
    command += ["--concurrency-range", str(concurrency), "--shape", f"INPUT0:{MODELS[model][0]}", *extra]
    before = cpu_times()
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as log:
        client = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def give_up() -> None:
            timed_out.set()
            client.kill()

        deadline = threading.Timer(RUN_TIMEOUT_S, give_up)
        deadline.start()
        try:
            seconds = sample_seconds(client, server, model)
        finally:
            deadline.cancel()
            if client.poll() is None:  # sampling failed: do not leave the load running
                client.kill()
            client.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
    steal = steal_share(before, cpu_times())
    if timed_out.is_set():
        gone = f"perf_analyzer did not finish in {RUN_TIMEOUT_S} s"
        return Run(key, protocol, concurrency, False, failure=gone)
    windows, latencies = parse_passes(output)
    stable = client.returncode == 0 and "Failed to obtain stable measurement" not in output
    failure = None
    if not stable:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        failure = lines[-1] if lines else f"exit {client.returncode}"
    return Run(key, protocol, concurrency, stable, windows, latencies, failure, steal, seconds)


def cpu_times() -> list[int]:
    """The machine's CPU time counters (``/proc/stat``'s first line); empty where there is none."""
    try:
        with open("/proc/stat") as stat:
            return [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def steal_share(before: Sequence[int], after: Sequence[int]) -> float | None:
    """The share of CPU time between two :func:`cpu_times` that was stolen (the 8th counter)."""
    if len(before) < 8 or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(spent)
    return spent[7] / total if total > 0 else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.stability", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per (protocol, concurrency) (default 10)")
    parser.add_argument("--servers", default=",".join(SERVERS), help="of conch,triton (default both)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="of grpc,http (default both)")
    parser.add_argument("--concurrencies", default=",".join(map(str, CONCURRENCIES)), help="default 1,4,8,32")
    parser.add_argument(
        "--model", default="tiny", choices=list(MODELS), help="the MLP measured (default tiny)"
    )
    parser.add_argument(
        "--window-ms", type=int, default=None, help="perf_analyzer's -p (default: its own 5000 ms)"
    )
    parser.add_argument("--conch-args", default="", help="extra `conch serve` flags, space-separated")
    parser.add_argument(
        "--variant-args",
        default=None,
        help="also run conch with these flags instead of --conch-args, as a third server taking its turn "
        "(e.g. '--busy-poll-us 0'): a flag's effect on stability, under the same host noise",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.servers = choices(parser, "--servers", args.servers, SERVERS)
    if args.variant_args is not None:
        args.servers = [*args.servers, VARIANT]
    args.protocols = choices(parser, "--protocols", args.protocols, PROTOCOLS)
    try:
        args.concurrencies = sorted({int(c) for c in args.concurrencies.split(",") if c.strip()})
    except ValueError:
        parser.error("--concurrencies: expected integers like 1,4,8,32")
    if args.runs < 1 or not args.concurrencies or min(args.concurrencies) < 1:
        parser.error("--runs and every concurrency must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    extra = [] if args.window_ms is None else ["-p", str(args.window_ms)]
    runs: list[Run] = []
    machine = describe_machine()
    with tempfile.TemporaryDirectory(prefix="conch-bench-stability-") as folder:
        repositories = {
            kind(key): SERVERS[kind(key)][0](Path(folder) / kind(key) / "repo", [args.model])
            for key in args.servers
        }
        flags = {"conch": args.conch_args.split(), VARIANT: (args.variant_args or "").split()}
        for number in range(1, args.runs + 1):
            for key in round_order(args.servers, number):
                print(f"run {number} of {args.runs}: {key}", flush=True)
                workdir = Path(folder) / key
                try:
                    with serve(key, repositories[kind(key)], workdir, flags.get(key, [])) as server:
                        runs += measure_server(key, server, args, extra)
                except (PeerUnavailable, ServerError, OSError) as exc:
                    print(f"  {key}: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
                finally:
                    keep_log(workdir / f"{kind(key)}.log")
    machine.append(f"load average at the end: {loadavg()}")
    name = started.strftime("%Y-%m-%d-%H%M%S") + "-stability.md"
    write_report(render(runs, args, started, machine), args.results_dir, name, "bench.stability")
    return 0


def measure_server(
    key: str, server: ServerProcess, args: argparse.Namespace, extra: Sequence[str]
) -> list[Run]:
    """One run at every (protocol, concurrency) on a started server."""
    runs = []
    for protocol in args.protocols:
        for concurrency in args.concurrencies:
            run = run_once(key, server, protocol, concurrency, args.model, extra)
            runs.append(run)
            cv = f"{run.cv:.1%}" if run.cv is not None else "-"
            verdict = "stable" if run.stable else "UNSTABLE"
            steal = f", steal {run.steal:.1%}" if run.steal is not None else ""
            contrast = slow_against_fast(run.seconds)
            slow = f"; slow/fast seconds: {contrast.describe()}" if contrast is not None else ""
            print(
                f"  {protocol} c={concurrency}: {verdict}, {len(run.windows)} windows, CV {cv}{steal}{slow}",
                flush=True,
            )
    return runs


def serve(key: str, repository: Path, workdir: Path, conch_args: Sequence[str]) -> ServerProcess:
    if kind(key) != "conch":
        return SERVERS[key][1](repository, workdir)
    return serve_conch(repository, workdir, extra=conch_args)


def summary_rows(runs: Sequence[Run]) -> list[str]:
    """One line per (protocol, concurrency, server): stable runs, median and worst CV, window range."""
    lines = []
    keys = sorted({(r.protocol, r.concurrency, r.server) for r in runs}, key=lambda k: (k[0], k[1], k[2]))
    for protocol, concurrency, server in keys:
        group = [r for r in runs if (r.protocol, r.concurrency, r.server) == (protocol, concurrency, server)]
        cvs = [r.cv for r in group if r.cv is not None]
        rates = [w for r in group for w in r.windows]
        median_cv = f"{statistics.median(cvs):.1%}" if cvs else "-"
        worst_cv = f"{max(cvs):.1%}" if cvs else "-"
        span = f"{min(rates):,.0f}-{max(rates):,.0f}" if rates else "-"
        stable = sum(r.stable for r in group)
        cells = [protocol, str(concurrency), server, f"{stable} of {len(group)}", median_cv, worst_cv, span]
        cells += _contrast_cells(median_contrast([slow_against_fast(r.seconds) for r in group]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _contrast_cells(contrast: Contrast | None) -> list[str]:
    if contrast is None:
        return ["-", "-", "-", "-"]
    batch = f"{contrast.batch:.2f}x" if contrast.batch is not None else "-"
    return [f"{contrast.rate:.2f}x", f"{contrast.server_us:.2f}x", f"{contrast.client_us:.2f}x", batch]


def unstable_line(run: Run) -> str:
    """An unstable run: why, its windows (infer/s), how much CPU the hypervisor took meanwhile and
    whose cost per request rose in its slow seconds."""
    windows = ", ".join(f"{w:,.0f}" for w in run.windows)
    steal = f"; steal {run.steal:.1%}" if run.steal is not None else ""
    contrast = slow_against_fast(run.seconds)
    slow = f"; slow against fast seconds: {contrast.describe()}" if contrast is not None else ""
    where = f"{run.server} {run.protocol} c={run.concurrency}"
    return f"- {where}: {run.failure} (windows/s: {windows or '-'}{steal}{slow})"


def render(runs: Sequence[Run], args: argparse.Namespace, started: datetime, machine: Sequence[str]) -> str:
    by_server = {key: [r for r in runs if r.server == key] for key in args.servers}
    totals = ", ".join(
        f"{key} {sum(r.stable for r in rs)} of {len(rs)} stable" for key, rs in by_server.items()
    )
    failures = [unstable_line(r) for r in runs if r.failure]
    window = f"-p {args.window_ms}" if args.window_ms else "its default 5000 ms windows"
    parts = [
        f"# perf_analyzer stability, {started.strftime('%Y-%m-%d %H:%M UTC')}\n",
        f"**{totals}.**\n",
        "| protocol | concurrency | server | stable runs | median CV of windows | worst CV | window rates/s "
        "| slow/fast seconds: rate | server CPU/request | client CPU/request | batch |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *summary_rows(runs),
        "\n## Unstable runs\n",
        *(failures or ["none"]),
        "\n## Machine\n",
        *(f"- {line}" for line in machine),
        f"- conch {conch_revision()}",
        "\n## Method\n",
        f"- `perf_analyzer -m {args.model} -u ADDRESS -i PROTOCOL -v --concurrency-range C --shape INPUT0:"
        f"{MODELS[args.model][0]}`, {window}, default stability (3 windows within 10 %, at most 10)",
        f"- {args.runs} run(s) per point; the servers alternate run by run, each started fresh for its run; "
        f"conch flags: `{args.conch_args or '(defaults)'}`"
        + (f"; {VARIANT} flags: `{args.variant_args}`" if args.variant_args is not None else ""),
        "- CV: population standard deviation over the mean of one run's window throughputs (every window "
        "it printed, the unsettled first ones included)",
        "- steal: the share of the machine's CPU time its hypervisor took during a run (`/proc/stat`), "
        "shown for unstable runs; median over all runs: "
        + (f"{statistics.median(st):.1%}" if (st := [r.steal for r in runs if r.steal is not None]) else "-"),
        "- slow/fast seconds: each run is sampled every second (requests from the server's statistics, "
        "CPU from `/proc` for the server with its child processes and for perf_analyzer); the slowest third "
        "of a run's seconds over its fastest third, as ratios of their means, median over the point's runs. "
        "Where the client's CPU per request rises as the server's does, the machine ran slower; where only "
        "the server's rises, the server did more work per request; where neither does, requests waited "
        "without using a core. batch: the model's mean rows per execution, from the same statistics. "
        "conch polls for `--busy-poll-us` after an answer, so at few clients its CPU per request follows "
        "one over its rate: read the client's column there",
        "- the load generator shares the server's 2 cores",
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.exit(main())
