"""``python -m bench.codec_cost``: the CPU one HTTP JSON inference request costs in conch's own code.

Why: with tiny models the server's per-request Python (decoding the JSON body, checking it against
the model's config, encoding the answer) is most of what a request costs. This times those parts as
the HTTP frontend runs them (``infer_codec.decode_request``, ``request_validation.validate_request``,
``Tensor.of`` and ``infer_codec.encode_response``, ``body.compress_for``), in-process, for a model of
W floats in and N out, one row a request, with and without ``"outputs"`` in the body. Each figure is
the least of several repeats, in microseconds a request: the development machine is shared, and the
least is the figure other load disturbs least.

``--tree DIR`` times the ``conch`` package of another checkout (``git archive REV conch | tar -x -C
DIR``), to compare two revisions run in turn. On the 2-core development machine, least of four
alternating rounds, before and after the commits that came with this file (all three parts, no
"outputs" in the body): 16->4 floats 19.8 -> 12.6 us, 256->256 43.5 -> 30.7 us, 1024->1000 99.2 ->
77.8 us; validation alone 5-6 us -> 1.3 us at every size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: (floats in, floats out) per request: the profiled tiny model first, then mid sizes.
SIZES = [(16, 4), (64, 64), (256, 256), (512, 512), (1024, 1000)]
#: A python-requests client's headers, which send no Accept-Encoding the server would act on.
SCOPE = {
    "headers": [
        (b"host", b"localhost:8000"),
        (b"user-agent", b"python-requests/2.31"),
        (b"accept-encoding", b"identity"),
        (b"accept", b"*/*"),
        (b"connection", b"keep-alive"),
        (b"content-type", b"application/json"),
        (b"content-length", b"1234"),
    ]
}


def _use_tree(tree: str) -> None:
    """Import ``conch`` from ``tree``, ahead of the editable install's own finder."""
    sys.path.insert(0, tree)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]


def _least_us(run: Callable[[], Any], loops: int, repeats: int) -> float:
    least = float("inf")
    for _ in range(repeats):
        started = time.perf_counter_ns()
        for _ in range(loops):
            run()
        least = min(least, (time.perf_counter_ns() - started) / loops / 1000)
    return least


def measure(repeats: int) -> dict[str, dict[str, float]]:
    """Microseconds a request of each size for decode, validate, encode and the three together."""
    import numpy as np

    from conch.core.request_validation import validate_request
    from conch.core.types import InferenceResponse, Tensor
    from conch.frontends.http import infer_codec
    from conch.frontends.http.body import compress_for
    from conch.repository.config import parse_config
    from conch.shared_memory.registry import SharedMemoryRegistry
    from conch.shared_memory.tensors import RegionLeases

    registry = SharedMemoryRegistry()
    results: dict[str, dict[str, float]] = {}
    for width, out in SIZES:
        config = parse_config(
            f"""
            name: "tiny"
            max_batch_size: 8
            input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {width} ] }} ]
            output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {out} ] }} ]
            """
        )
        answer = np.random.default_rng(out).standard_normal((1, out)).astype(np.float32)
        data = np.random.default_rng(width).standard_normal(width).astype(np.float32).tolist()
        for with_outputs in (False, True):
            document: dict[str, Any] = {
                "inputs": [{"name": "INPUT0", "shape": [1, width], "datatype": "FP32", "data": data}]
            }
            if with_outputs:
                document["outputs"] = [{"name": "OUTPUT0"}]
            body = json.dumps(document).encode()
            request = infer_codec.decode_request(body, None, "tiny", "", RegionLeases(registry), 32)

            def decode(body: bytes = body) -> Any:
                return infer_codec.decode_request(body, None, "tiny", "", RegionLeases(registry), 32)

            def validate(request: Any = request, config: Any = config) -> None:
                validate_request(request, config, False)

            def encode(request: Any = request, answer: Any = answer) -> None:
                response = InferenceResponse("tiny", "1", outputs=[Tensor.of("OUTPUT0", answer)])
                compress_for(SCOPE, infer_codec.encode_response(response, request)[0])

            def total(decode: Callable[[], Any] = decode, config: Any = config, answer: Any = answer) -> None:
                decoded = decode()
                validate_request(decoded, config, False)
                response = InferenceResponse("tiny", "1", outputs=[Tensor.of("OUTPUT0", answer)])
                compress_for(SCOPE, infer_codec.encode_response(response, decoded)[0])

            loops = max(200, 200_000 // (width + out))
            parts = {"decode": decode, "validate": validate, "encode": encode, "total": total}
            key = f"{width}->{out}{' +outputs' if with_outputs else ''}"
            results[key] = {part: _least_us(run, loops, repeats) for part, run in parts.items()}
            print(f"{key:20s} " + "  ".join(f"{p} {us:7.2f}" for p, us in results[key].items()), flush=True)
    return results


def main() -> None:
    """Parse the flags, time each size, and write the figures as JSON when asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", help="import conch from this folder instead")
    parser.add_argument("--repeats", type=int, default=9, help="repeats per figure; the least is kept")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.tree or os.environ.get("BENCH_TREE"):
        _use_tree(args.tree or os.environ["BENCH_TREE"])
    results = measure(args.repeats)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
