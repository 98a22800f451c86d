"""``python -m bench.python_stub_cost BASE NEW``: the model process's ``execute`` path in two conch trees.

Why beside ``bench.python_backend_ab``: on a shared 2-core machine an end-to-end A/B of the same tree
against itself moves by tens of percent a round, far more than a change of a few microseconds a
request. This times what a change to ``conch/backends/python/stub/`` can change, in-process and with
nothing else in the way: ``Stub.execute`` of each tree's stub on one batch (inputs read from a shared
memory segment as the server writes them, a trivial Python model, outputs checked and encoded into
the model's segment), the reply captured instead of sent. Each tree runs in its own interpreter,
taking turns; the figure is the lowest median of 100 executions, the least disturbed by other jobs.

``--width``: floats per input row (16, ``tiny``'s; 150528 is a 3x224x224 image), ``--batch``:
requests per execute.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STUB = Path("conch/backends/python/stub")
EXECUTIONS = 3000
CHUNK = 100


def time_stub(stub_dir: Path, width: int, batch: int) -> float:
    """Microseconds per execute of the stub in ``stub_dir`` (run inside that stub's interpreter)."""
    sys.path.insert(0, str(stub_dir))
    import conch_ipc
    import conch_python_stub
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class Model:
        def execute(self, requests: list[Any]) -> list[Any]:
            responses = []
            for request in requests:
                value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value[:, :4] * 2)]))
            return responses

    class Channel:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        def send(self, message: dict[str, Any]) -> None:
            self.sent.append(message)

    config = {
        "name": "stub_cost",
        "max_batch_size": 64,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [width]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    channel = Channel()
    server_pool = conch_ipc.SegmentPool(f"conch-stub-cost-{width}-{batch}-s")
    runtime = conch_python_stub.Runtime(
        channel, conch_ipc.SegmentPool(f"conch-stub-cost-{width}-{batch}-m"), stub_dir
    )
    stub = conch_python_stub.Stub(runtime, stub_dir / "model.py")
    stub.model_class = Model
    stub.initialize({"args": {"model_config": json.dumps(config)}, "decoupled": False})
    channel.sent.clear()
    row = np.random.default_rng(0).random((1, width), dtype=np.float32)
    spent = []
    try:
        for call in range(EXECUTIONS):
            segment, refs = server_pool.write([("INPUT0", row)] * batch)
            fields = {"outputs": ["OUTPUT0"], "request_id": "", "correlation_id": 0, "flags": 0}
            fields |= {"parameters": "{}", "model_name": "stub_cost", "model_version": 1}
            entries = [{"key": key, "inputs": [tuple(ref)], **fields} for key, ref in enumerate(refs)]
            message = {"op": "execute", "call": call, "segment": segment, "requests": entries}
            started = time.perf_counter_ns()
            stub.execute(message)
            spent.append(time.perf_counter_ns() - started)
            reply = channel.sent.pop()
            if reply.get("error") or any(entry and entry.get("error") for entry in reply["responses"]):
                raise RuntimeError(f"the model failed: {reply}")
            server_pool.release(reply.get("release") or reply.get("kept"))
            runtime.pool.release(reply["segment"])
    finally:
        server_pool.close()
        runtime.pool.close()
    spent = spent[CHUNK * 5 :]  # past the first segments' page faults
    return min(statistics.median(spent[i : i + CHUNK]) for i in range(0, len(spent), CHUNK)) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.python_stub_cost", description=__doc__)
    parser.add_argument("base", type=Path, help="the tree to compare against (a git worktree, say)")
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child: time this stub folder
    args = parser.parse_args()
    if args.one is not None:
        print(time_stub(args.one, args.width, args.batch))
        return
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    results: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name in trees if round_ % 2 == 0 else reversed(trees):
            command = [
                sys.executable,
                "-m",
                "bench.python_stub_cost",
                "x",
                "y",
                "--one",
                str(trees[name] / STUB),
            ]
            command += ["--width", str(args.width), "--batch", str(args.batch)]
            finished = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
            results[name].append(float(finished.stdout.split()[-1]))
            print(
                f"round {round_} {name}: {results[name][-1]:.1f} us per execute of {args.batch}", flush=True
            )
    base, new = min(results["base"]), min(results["new"])
    print(
        f"width {args.width}, batch {args.batch}: base {base:.1f} us, new {new:.1f} us per execute "
        f"(best round); "
        f"{(new - base) / args.batch:+.2f} us a request"
    )


if __name__ == "__main__":
    main()
