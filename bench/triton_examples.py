"""``python -m bench.triton_examples EXAMPLES``: Triton's own Python client examples, unchanged,
against conch and against Triton 2.51, on the same models.

Why: users come with ``tritonclient`` scripts written for Triton, and the first ones they try are the
examples in Triton's client repository (``src/python/examples``: ``simple_http_infer_client.py``,
``simple_grpc_sequence_stream_infer_client.py``, ``image_client.py``, ...). Each expects models of
Triton's test repository by name (``simple``, ``simple_string``, ``simple_sequence``, ``repeat_int32``,
``densenet_onnx``, ...). ``bench/triton_example_models/`` has conch's own Python-backend versions of
them, with the names, types and shapes the examples send and the answers they check, so the same
repository loads on both servers.

The examples are not part of conch; take them from a checkout of Triton's client repository::

    git clone --depth 1 https://github.com/triton-inference-server/client /tmp/triton-client
    python -m bench.triton_examples /tmp/triton-client/src/python/examples
    python -m bench.triton_examples /tmp/triton-client/src/python/examples --servers conch,conch-proxies

Each example runs as its own process against each server; it passes when it exits 0 without printing
``error`` or ``FAILED`` (a few examples print an error and exit 0). The report lists every example by
server, and writes the output of the failing ones after the table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.loadgen import PERF_ANALYZER
from bench.peers import PeerUnavailable, serve_conch, serve_triton
from bench.run import RESULTS, describe_machine, write_report
from bench.servers import ServerProcess

MODELS = Path(__file__).parent / "triton_example_models"
#: Both servers load every model at start and take load and unload calls (the model control examples).
CONTROL = ("--model-control-mode=explicit", "--load-model=*")
#: Clients whose server-metadata check wants Triton's name.
CONCH_FLAGS = (*CONTROL, "--server-name=triton")
SERVERS = ("conch", "conch-proxies", "triton")
TIMEOUT_S = 120


@dataclass(frozen=True)
class Example:
    """One example script and the arguments it runs with; ``{http}`` and ``{grpc}`` are the server's."""

    script: str
    args: tuple[str, ...]
    #: Why it cannot pass on any server here, when that is known beforehand (shown in the report).
    expected_failure: str = ""


IMAGE = ("-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION")
#: perf_analyzer's trace options: the servers here export no traces, so the level asked is OFF.
TRACE_OFF = ("--trace-level", "OFF", "--trace-rate", "100", "--trace-count", "-1")
#: Not a script in the examples folder: ``perf_analyzer`` itself (bench/loadgen.py finds the binary).
PERF_ANALYZER_NAME = "perf_analyzer"
#: repeat_int32's DELAY is in microseconds: random data would sleep for hours.
REPEAT_ZEROS = ("--shape", "IN:4", "--shape", "DELAY:4", "--input-data", "zero")
EXAMPLES = (
    Example("simple_http_infer_client.py", ("-u", "{http}")),
    Example("simple_http_async_infer_client.py", ("-u", "{http}")),
    Example("simple_http_aio_infer_client.py", ("-u", "{http}")),
    Example("simple_http_health_metadata.py", ("-u", "{http}")),
    Example("simple_http_string_infer_client.py", ("-u", "{http}")),
    Example("simple_http_shm_client.py", ("-u", "{http}")),
    Example("simple_http_shm_string_client.py", ("-u", "{http}")),
    Example("simple_http_sequence_sync_infer_client.py", ("-u", "{http}")),
    Example(
        "simple_http_model_control.py",
        ("-u", "{http}"),
        "it expects 7 models in the repository index; these are the 8 that the gRPC example expects",
    ),
    Example("reuse_infer_objects_client.py", ("-i", "http", "-u", "{http}")),
    Example("reuse_infer_objects_client.py", ("-i", "grpc", "-u", "{grpc}")),
    Example("simple_grpc_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_async_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_aio_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_custom_args_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_keepalive_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_health_metadata.py", ("-u", "{grpc}")),
    Example("simple_grpc_string_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_shm_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_shm_string_client.py", ("-u", "{grpc}")),
    Example("grpc_explicit_int_content_client.py", ("-u", "{grpc}")),
    Example("grpc_explicit_int8_content_client.py", ("-u", "{grpc}")),
    Example("grpc_explicit_byte_content_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_sequence_stream_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_sequence_sync_infer_client.py", ("-u", "{grpc}")),
    Example("simple_grpc_aio_sequence_stream_infer_client.py", ("-u", "{grpc}")),
    # It expects INTERNAL and "failed to poll from model repository" for a file name longer than the
    # system allows, as newer Tritons answer and conch does; Triton 2.51 exits on that load.
    Example("simple_grpc_model_control.py", ("-u", "{grpc}")),
    Example("simple_grpc_custom_repeat.py", ("-u", "{grpc}")),
    Example("grpc_client.py", ("-u", "{grpc}")),
    Example("grpc_image_client.py", (*IMAGE, "-u", "{grpc}", "{image}")),
    Example("image_client.py", (*IMAGE, "-i", "grpc", "-u", "{grpc}", "{image}")),
    Example("image_client.py", (*IMAGE, "-i", "grpc", "--streaming", "-u", "{grpc}", "{image}")),
    Example(
        "image_client.py",
        (*IMAGE, "-i", "http", "-u", "{http}", "{image}"),
        "over HTTP it imports attrdict, which does not import on Python 3.10 and later",
    ),
    # NVIDIA's load generator in the modes these models exercise, 2 clients: whether it measures at
    # all (any 3 windows in a row are taken as stable; bench.stability measures stability).
    *(
        Example(PERF_ANALYZER_NAME, (*mode, "--concurrency-range", "2", "-p", "1000", "-s", "100", "-r", "3"))
        for mode in (
            ("-m", "simple", "-i", "http", "-u", "{http}"),
            ("-m", "simple", "-i", "grpc", "-u", "{grpc}", "-b", "4"),
            ("-m", "simple", "-i", "grpc", "-u", "{grpc}", "--shared-memory", "system"),
            ("-m", "simple_string", "-i", "http", "-u", "{http}", "--string-data", "7"),
            ("-m", "simple_sequence", "-i", "grpc", "-u", "{grpc}", "--streaming"),
            ("-m", "simple_sequence", "-i", "http", "-u", "{http}"),
            ("-m", "repeat_int32", "-i", "grpc", "-u", "{grpc}", "--streaming", *REPEAT_ZEROS),
            # The trace settings API (Triton's trace extension), set before measuring.
            ("-m", "simple", "-i", "http", "-u", "{http}", *TRACE_OFF),
            ("-m", "simple", "-i", "grpc", "-u", "{grpc}", *TRACE_OFF),
        )
    ),
)


@dataclass(frozen=True)
class Outcome:
    passed: bool
    output: str
    #: Set when the server exited while the example ran.
    server_died: str = ""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.triton_examples", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "examples", type=Path, help="the src/python/examples folder of Triton's client repository"
    )
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"any of {', '.join(SERVERS)}")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    servers = [name.strip() for name in args.servers.split(",") if name.strip()]
    unknown = sorted(set(servers) - set(SERVERS))
    if unknown or not servers:
        print(f"bench.triton_examples: --servers takes {', '.join(SERVERS)}", file=sys.stderr)
        return 2
    scripts = {e.script for e in EXAMPLES if e.script != PERF_ANALYZER_NAME}
    missing = sorted(script for script in scripts if not (args.examples / script).is_file())
    if missing:
        print(f"bench.triton_examples: {args.examples} lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    outcomes: dict[str, list[Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="conch-triton-examples-") as scratch:
        workdir = Path(scratch)
        repository = workdir / "models"
        shutil.copytree(MODELS, repository)
        image = write_image(workdir / "image.jpg")
        for name in servers:
            try:
                server = start(name, repository, workdir / name)
            except PeerUnavailable as exc:
                print(f"  {name}: {exc}", flush=True)
                continue
            with server:
                outcomes[name] = [run_on(server, example, args.examples, image) for example in EXAMPLES]
            passed = sum(o.passed for o in outcomes[name])
            print(f"  {name}: {passed} of {len(EXAMPLES)} examples passed", flush=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M%S")
    write_report(report(outcomes), args.results_dir, f"{stamp}-triton-examples.md", "bench.triton_examples")
    return 0


def start(name: str, repository: Path, workdir: Path) -> ServerProcess:
    """The server ``name`` on ``repository``, not started yet (``with`` starts it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "triton":
        return serve_triton(repository, workdir, extra=CONTROL)
    proxies = ("--proxies=2",) if name == "conch-proxies" else ()
    return serve_conch(repository, workdir, extra=(*CONCH_FLAGS, *proxies))


def run_on(server: ServerProcess, example: Example, folder: Path, image: Path) -> Outcome:
    """``example`` against ``server``; a server that exits meanwhile fails it, and is started again
    so that the next example is not failed by this one."""
    outcome = run(example, folder, server, image)
    assert server.process is not None
    if server.process.poll() is None:
        return outcome
    died = f"the server exited during this example (status {server.process.returncode})"
    server.start()
    return Outcome(False, f"{outcome.output}\n{died}", died)


def run(example: Example, folder: Path, server: ServerProcess, image: Path) -> Outcome:
    values = {"http": server.ports.http_address, "grpc": server.ports.grpc_address, "image": str(image)}
    if example.script == PERF_ANALYZER_NAME:
        # The model control examples before it unload 'simple': perf_analyzer starts on loaded models.
        model = example.args[example.args.index("-m") + 1]
        load = f"{server.ports.http_url}/v2/repository/models/{model}/load"
        urllib.request.urlopen(urllib.request.Request(load, data=b"{}"), timeout=60).close()
        program = [str(PERF_ANALYZER)]
    else:
        program = [sys.executable, str(folder / example.script)]
    command = [*program, *(a.format(**values) for a in example.args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=folder)
    except subprocess.TimeoutExpired:
        return Outcome(False, f"no answer within {TIMEOUT_S} s")
    output = done.stdout + done.stderr
    flagged = any(word in line for line in output.splitlines() for word in ("error", "FAILED"))
    return Outcome(done.returncode == 0 and not flagged, output)


def write_image(path: Path) -> Path:
    """A random 400x300 JPEG: the image examples only need something to resize and classify."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (300, 400, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _cell(outcome: Outcome) -> str:
    if outcome.passed:
        return "pass"
    return "**fail** (the server exited)" if outcome.server_died else "**fail**"


def report(outcomes: dict[str, list[Outcome]]) -> str:
    names = list(outcomes)
    lines = [
        "# Triton's client examples against conch and Triton",
        "",
        "`python -m bench.triton_examples EXAMPLES`: each of Triton's Python client examples, unchanged, "
        "against each server, on the models of `bench/triton_example_models/`; then `perf_analyzer` in "
        "the modes those models exercise.",
        "",
        *(f"- {line}" for line in describe_machine()),
        "",
        "| example | arguments | " + " | ".join(names) + " | known reason |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for index, example in enumerate(EXAMPLES):
        cells = [_cell(outcomes[name][index]) for name in names]
        arguments = " ".join(example.args).replace("{http}", "HTTP").replace("{grpc}", "GRPC")
        lines.append(
            f"| `{example.script}` | `{arguments.replace('{image}', 'IMAGE')}` | "
            + " | ".join(cells)
            + f" | {example.expected_failure} |"
        )
    totals = [f"{name} {sum(o.passed for o in outcomes[name])} of {len(EXAMPLES)}" for name in names]
    lines += ["", "Passed: " + ", ".join(totals) + ".", ""]
    for name in names:
        for example, outcome in zip(EXAMPLES, outcomes[name], strict=True):
            if not outcome.passed:
                tail = "\n".join(outcome.output.strip().splitlines()[-6:])
                lines += [
                    f"## {name}: `{example.script} {' '.join(example.args)}`",
                    "",
                    "```",
                    tail,
                    "```",
                    "",
                ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
