"""``python -m bench.streams_profile``: where a stream record's CPU goes in ``conch serve --streams``.

One server drains a pre-filled stream of ``mlp`` records (the tensor in the binary field, as
``bench.streams`` sends them) while ``py-spy`` samples it (``bench.py_spy``: the one beside the
interpreter, else on the PATH; it is in the bench extra). Every sample's innermost conch or library
frame is put in one area: reading from the broker (redis-py and its reply parser), decoding the
record, the request path (server, router, scheduler), ONNX Runtime, encoding and writing the result,
acknowledging, and the event loop itself. The report gives each area's share of the samples with
the drain rate, and the functions with the most samples of their own.

Writes ``bench/results/<timestamp>-streams-profile.md`` and prints it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.models import write_conch_repository
from bench.py_spy import count_samples, sampled
from bench.report import publish
from bench.streams import MODEL, RESULTS, drain_rate, prefill
from tests.integration.redis_server import running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import stream_entry, write_streams_yaml

#: (area, what a frame's file path or function name holds), first match wins, innermost frame first.
AREAS = (
    ("ONNX Runtime", ("onnxruntime",)),
    ("broker: redis-py, reply parsing", ("redis/", "hiredis")),
    ("record decode", ("streams/record.py", "frontends/http/infer_codec", "core/codecs")),
    ("result encode and write", ("result_fields", "_write_once", "redis_broker.py")),
    ("request path: server, router, scheduler", ("conch/server.py", "conch/router", "conch/scheduling")),
    ("backend around the session", ("conch/backends",)),
    ("stream consumer", ("conch/streams",)),
    ("event loop", ("asyncio", "uvloop", "selectors")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=30_000, help="records pre-filled in the stream")
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        repository = write_conch_repository(home / "models", [MODEL])
        with running_redis(home / "redis") as broker:
            client = broker.client()
            config = write_streams_yaml(home / "streams.yaml", broker.url, [stream_entry(MODEL, "p-in")])
            prefill(client, "p-in", args.records, "binary")
            server = ServerProcess(repository, ["--streams", str(config)]).start(home)
            try:
                assert server.process is not None
                rates: list[float] = []
                raw = sampled(
                    server.process.pid,
                    home / "samples.txt",
                    250,
                    lambda: rates.append(drain_rate(client, "p-in", args.records, 600)),
                )
            finally:
                server.stop()
    areas, functions, total = count_samples(raw, AREAS)
    lines = [
        f"# Where a stream record's CPU goes: `{MODEL}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python -m bench.streams_profile --records {args.records}`: one `conch serve --streams` drains "
        f"a pre-filled stream of {args.records} binary-field records at **{rates[0]:.0f} records/s** "
        f"while py-spy samples it 250 times a second ({total} samples of the server's busy threads; "
        f"idle ones are left out); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
        "",
        "| area (innermost frame that belongs to one) | share of samples |",
        "|---|---|",
        *(f"| {area} | {count / total:.1%} |" for area, count in areas.most_common()),
        "",
        f"Innermost functions, top {args.top}:",
        "",
        "| function | share |",
        "|---|---|",
        *(f"| `{name}` | {count / total:.1%} |" for name, count in functions.most_common(args.top)),
    ]
    text = "\n".join(lines) + "\n"
    publish(text, "streams-profile", RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
