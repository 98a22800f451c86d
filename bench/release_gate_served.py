"""``python -m bench.release_gate_served``: one real release of each of :mod:`bench.release_gate_cases`'s
four candidates, on a real ``conch serve`` under client load, with the gate's default settings.

Why: the simulation repeats each case 20 times; this run checks that a real server, its router, shadow
copies and timings give the same decisions. Each case starts a poll-mode server on loopback with
version 1, declares the release (10% for 2m, 50% with shadow for 1m, 100%, no ``gate:``), installs
version 2 as ``conch install`` does (one rename), and drives 16 client threads (half HTTP, half gRPC)
until the release is decided: promoted, rolled back or paused. ``--repeats N`` releases each case N
times in rounds (one of each case per round), each on a fresh server, writes the report after every
release, and ends with how many went the right way.

The models take FP32 ``INPUT0`` [N, 4] of uniform values and answer ``OUTPUT0`` = ``INPUT0``, a 4-way
score whose argmax is the prediction, after ``--layers`` [512, 512] matrix products whose result is
multiplied by zero (the compute). A candidate negates the rows whose first value is above
``flip_above``: above 0.995 changes about 0.5% of predictions (the benign retrain), above 0.5 about
half (shuffled labels). The slower-compute candidate runs twice the layers: its compute per execution
doubled. The default of 32 layers (3 to 6 ms an execution on 2 cores) makes compute most of a
client's latency at 16 clients; with 4 layers (0.1 ms) a client's latency is mostly the frontends'
queue, and doubled compute does not show at the clients at all (``--layers 4 --slower 16`` is the
case where it does, by 0.98x to 4.1x with the machine's load).
Each run also records, per step, the P95 ratio of the answers clients got (candidate / baseline), and
``clients_over_limit``: whether that ratio broke the default limit in the last step the gate judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.integration.load_traffic import Answer, Traffic
from tests.integration.server_process import ServerProcess

MODEL = "scored"
WIDTH, LAYERS = 512, 32
CONFIG = f'name: "{MODEL}"\nmax_batch_size: 8\nversion_policy: {{ latest: {{ num_versions: 1 }} }}\n'
STEPS: list[dict[str, Any]] = [
    {"weight": 10, "duration": "2m"},
    {"weight": 50, "duration": "1m", "shadow": True},
    {"weight": 100},
]
#: name: (flip_above, slower: whether its compute is ``--slower`` times the baseline's, the right decision)
CASES: dict[str, tuple[float, bool, str]] = {
    "identical": (2.0, False, "promoted"),
    "benign_retrain": (0.995, False, "promoted"),
    "shuffled_labels": (0.5, False, "rolled_back"),
    "slower_compute": (2.0, True, "rolled_back"),
}
CLIENTS = 16
P95_LIMIT = 0.2  # the gate's default max_p95_increase
DECIDED = {"promoted", "rolled_back", "paused", "failed"}


def scoring_model(flip_above: float, layers: int) -> onnx.ModelProto:
    """See the module's docstring; the weights are seeded, so every version computes the same."""
    rng = np.random.default_rng(0)
    weights: dict[str, np.ndarray] = {"widen": rng.random((4, WIDTH), dtype=np.float32)}
    nodes = [helper.make_node("MatMul", ["INPUT0", "widen"], ["h0"])]
    for layer in range(layers):
        weights[f"w{layer}"] = rng.random((WIDTH, WIDTH), dtype=np.float32) / WIDTH
        nodes.append(helper.make_node("MatMul", [f"h{layer}", f"w{layer}"], [f"h{layer + 1}"]))
    constants: dict[str, np.ndarray] = {
        "nothing": np.array(0.0, np.float32),
        "start": np.array([0], np.int64),
        "stop": np.array([1], np.int64),
        "axis": np.array([1], np.int64),
        "threshold": np.array(flip_above, np.float32),
        "two": np.array(2.0, np.float32),
        "one": np.array(1.0, np.float32),
    }
    nodes += [
        helper.make_node("ReduceSum", [f"h{layers}"], ["total"], keepdims=1),
        helper.make_node("Mul", ["total", "nothing"], ["zeroed"]),
        helper.make_node("Slice", ["INPUT0", "start", "stop", "axis"], ["first"]),
        helper.make_node("Greater", ["first", "threshold"], ["above"]),
        helper.make_node("Cast", ["above"], ["above_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["above_f", "two"], ["twice"]),
        helper.make_node("Sub", ["one", "twice"], ["sign"]),
        helper.make_node("Mul", ["INPUT0", "sign"], ["signed"]),
        helper.make_node("Add", ["signed", "zeroed"], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "scored",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(array, name) for name, array in {**weights, **constants}.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def uniform() -> np.ndarray:
    return np.random.default_rng().random((1, 4), dtype=np.float32)


def serve_version_1(scratch: Path, layers: int) -> ServerProcess:
    """A poll-mode ``conch serve`` on loopback whose repository (``scratch / "models"``) holds version 1."""
    root = scratch / "models"
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / MODEL / "1" / "model.onnx").write_bytes(scoring_model(2.0, layers).SerializeToString())
    poll = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]
    return ServerProcess(root, [*poll, "--state-dir", str(scratch / "state")]).start(scratch)


def release_version_2(server: ServerProcess, steps: list[dict[str, Any]], model: onnx.ModelProto) -> None:
    """Declare the release of version 2 (no ``gate:``), then install it as ``conch install`` does:
    one rename into the repository the server polls."""
    spec = {"candidate": 2, "baseline": 1, "steps": steps}
    reply = server.request("POST", f"/v2/models/{MODEL}/release", json.dumps(spec).encode())
    assert reply.status == 200, reply.body
    root = server.repository
    assert root is not None
    staging = root / f".{MODEL}-2"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(model.SerializeToString())
    staging.rename(root / MODEL / "2")


def run_case(name: str, scratch: Path, timeout_s: float, layers: int, slower: int) -> dict[str, Any]:
    flip_above, is_slower, expected = CASES[name]
    server = serve_version_1(scratch / name, layers)
    traffic = Traffic(server, MODEL, uniform, clients=CLIENTS).start()
    try:
        time.sleep(5.0)  # warm: both the clients and the server's first executions
        release_version_2(server, STEPS, scoring_model(flip_above, layers * slower if is_slower else layers))
        deadline = time.monotonic() + timeout_s
        status = judged = _status(server)
        while status["state"] not in DECIDED and time.monotonic() < deadline:
            time.sleep(0.5)
            status = _status(server)
            step = status["step"]
            if status["state"] == "progressing" and step and STEPS[step - 1]["weight"] != 100:
                judged = status  # the last look at a judged step: its figures when it let go
    finally:
        traffic.finish()
        server.stop()
    started = next(e["time"] for e in status["history"] if e["event"] == "started")
    decided = status["history"][-1]
    wall = time.time() - time.monotonic()  # Answer.sent is on the monotonic clock
    during = [a for a in traffic.answers if started <= a.sent + wall <= decided["time"]]
    candidate = sum(a.version == 2 for a in during)
    gate = status["gate"] if status["gate"]["checks"] else judged["gate"]
    steps = [e["time"] for e in status["history"] if e["event"] in ("started", "advanced")]
    windows = list(zip(steps, [*steps[1:], decided["time"]], strict=True))
    by_step = [_client_p95_ratio(during, start - wall, end - wall) for start, end in windows]
    judged_ratios = [ratio for ratio in by_step[: len(STEPS) - 1] if ratio is not None]
    return {
        "case": name,
        "expected": expected,
        "state": status["state"],
        "right_way": status["state"] == expected,
        "decided_after_s": round(decided["time"] - started, 1),
        "step": status["step"],
        "reason": decided["reason"],
        "candidate_answers": candidate,
        "client_answers": len(during),
        "candidate_share": candidate / len(during) if during else 0.0,
        "client_failures": len(traffic.failures),
        "client_p95_ratio_by_step": by_step,
        "clients_over_limit": bool(judged_ratios) and judged_ratios[-1] > 1 + P95_LIMIT,
        "gate": gate,
    }


def _client_p95_ratio(answers: list[Answer], start: float, end: float) -> float | None:
    """Candidate P95 / baseline P95 of the answers clients got from ``start`` to ``end`` (monotonic);
    None where a version answered fewer than 100 of them."""
    by_version = {v: [a.seconds for a in answers if a.version == v and start <= a.sent < end] for v in (1, 2)}
    if min(len(times) for times in by_version.values()) < 100:
        return None
    return round(float(np.percentile(by_version[2], 95) / np.percentile(by_version[1], 95)), 3)


def _status(server: ServerProcess) -> dict[str, Any]:
    return dict(server.request("GET", f"/v2/models/{MODEL}/release").json())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=1, help="releases of each case, one after another")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a release may take")
    parser.add_argument("--layers", type=int, default=LAYERS, help="the baseline's matrix products")
    parser.add_argument("--slower", type=int, default=2, help="how many times the slower candidate's layers")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    report = args.out / f"{stamp}-release-gate-served.json"
    with tempfile.TemporaryDirectory() as scratch:
        for repeat, name in ((r, n) for r in range(args.repeats) for n in args.cases):
            found = run_case(name, Path(scratch) / f"{repeat}-{name}", args.timeout, args.layers, args.slower)
            found["layers"] = args.layers
            results.append(found)
            report.write_text(json.dumps(results, indent=1) + "\n")
            print(
                f"{name} #{repeat + 1}: {found['state']} ({'right' if found['right_way'] else 'WRONG'}) "
                f"{found['decided_after_s']} s after start, step {found['step']}, candidate "
                f"{found['candidate_answers']} of {found['client_answers']} client answers "
                f"({found['candidate_share']:.1%}), {found['client_failures']} client failures, clients' "
                f"P95 ratio by step {found['client_p95_ratio_by_step']}"
                f"{' (over the limit)' if found['clients_over_limit'] else ''}; {found['reason']}"
            )
            for check in found["gate"]["checks"]:
                print(f"    {check}", flush=True)
    for name in args.cases:
        runs = [found for found in results if found["case"] == name]
        right = sum(found["right_way"] for found in runs)
        times = sorted(found["decided_after_s"] for found in runs)
        print(
            f"{name}: {right} of {len(runs)} the right way ({CASES[name][2]}); decided after "
            f"{times[len(times) // 2]} s (median), {times[-1]} s (worst)"
        )
    return 0 if all(found["right_way"] for found in results) else 1


if __name__ == "__main__":
    sys.exit(main())
