"""``python -m bench.streams``: streaming inference on Redis Streams against HTTP, on the sweep's ``mlp``.

One ``conch serve --streams`` and one redis-server (Debian's) on this machine:

1. **Throughput.** The input stream is pre-filled with ``--records`` records (the tensor in the
   entry's ``binary`` field, as the HTTP point sends it in the binary extension; then again as JSON
   rows); records/s is taken from the first read to the last acknowledgement, read off the group
   (``XINFO GROUPS``: entries read, pending). The same server then takes perf_analyzer's HTTP binary
   point at 32 clients; the target is streams >= 0.8x that.
2. **Latency.** Records produced at a quarter of the measured stream rate for ``--seconds``; P50 and P99 from
   each record's ingestion timestamp to its result written (the result entry's id is the broker's
   time of writing it).
3. **Kill and restart**, and **rebalance** between two replicas with SIGKILLs
   (``tests/integration/stream_scenarios.py``): records sent, results, duplicates, lost.

Writes ``bench/results/<timestamp>-streams.md`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import redis

from bench import loadgen
from bench.models import MODELS, write_conch_repository
from bench.report import publish
from tests.integration.redis_server import RedisServer, running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import stream_entry, wait_until, write_streams_yaml
from tests.integration.stream_scenarios import kill_and_restart, rebalance

MODEL = "mlp"
RESULTS = Path(__file__).parent / "results"


def binary_record(rng: np.random.Generator) -> dict[str, bytes]:
    """One ``mlp`` row as a V2 header in ``data`` and its FP32 bytes in ``binary``, outputs asked binary."""
    width = MODELS[MODEL][0]
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [1, width],
                "parameters": {"binary_data_size": width * 4},
            }
        ],
        "parameters": {"binary_data_output": True},  # as perf_analyzer asks over HTTP
    }
    return {b"data": json.dumps(header).encode(), b"binary": rng.random(width, dtype=np.float32).tobytes()}


def json_record(rng: np.random.Generator) -> dict[str, bytes]:
    """One ``mlp`` row as a JSON object (input name to value)."""
    return {b"data": json.dumps({"INPUT0": rng.random(MODELS[MODEL][0]).round(6).tolist()}).encode()}


def prefill(client: redis.Redis, stream: str, records: int, form: str) -> None:
    rng = np.random.default_rng(0)
    make = binary_record if form == "binary" else json_record
    samples = [make(rng) for _ in range(64)]
    for start in range(0, records, 500):
        pipe = client.pipeline(transaction=False)
        for index in range(start, min(records, start + 500)):
            fields = {**samples[index % 64], b"ingestion_timestamp": f"{time.time():.6f}".encode()}
            pipe.xadd(stream, fields)  # type: ignore[arg-type]
        pipe.execute()


def group_figures(client: redis.Redis, stream: str) -> tuple[int, int]:
    """Entries the group has read, and how many of them are pending."""
    try:
        groups = client.xinfo_groups(stream)
    except redis.exceptions.ResponseError:  # not created yet
        return 0, 0
    for group in groups:
        if group["name"] == b"conch":
            return int(group["entries-read"] or 0), int(group["pending"])
    return 0, 0


def drain_rate(client: redis.Redis, stream: str, records: int, timeout: float) -> float:
    """Records/s from the first read of ``stream`` to the last acknowledgement of ``records``."""
    deadline = time.monotonic() + timeout
    first = None
    while time.monotonic() < deadline:
        read, waiting = group_figures(client, stream)
        now = time.perf_counter()
        if first is None and read > 0:
            first = now
        if read >= records and waiting == 0:
            assert first is not None
            return records / (now - first)
        time.sleep(0.005)
    raise RuntimeError(f"{stream}: {records} records not acknowledged within {timeout}s")


def paced_latencies(
    client: redis.Redis, stream: str, results: str, rate: float, seconds: float
) -> list[float]:
    """Produce ``rate`` records/s for ``seconds``; each record's ms from ingestion to result written."""
    rng = np.random.default_rng(1)
    samples = [binary_record(rng) for _ in range(64)]
    total = int(rate * seconds)
    begun = time.monotonic()
    for index in range(total):
        fields = {**samples[index % 64], b"ingestion_timestamp": f"{time.time():.6f}".encode()}
        client.xadd(stream, fields)  # type: ignore[arg-type]
        late = begun + (index + 1) / rate - time.monotonic()
        if late > 0:
            time.sleep(late)
    wait_until(lambda: client.xlen(results) >= total, 120, f"{total} paced results")
    latencies = []
    for entry_id, fields in client.xrange(results):
        written_s = int(entry_id.split(b"-")[0]) / 1000
        ingested = json.loads(fields[b"data"])["ingestion_timestamp"]
        latencies.append(max(0.0, written_s - float(ingested)) * 1000)
    return latencies


def drained_by_new_server(
    repository: Path, config: Path, client: redis.Redis, stream: str, records: int, home: Path
) -> tuple[float, ServerProcess]:
    """Start a server on a pre-filled ``stream``; its records/s from first read to last acknowledgement."""
    started: list[ServerProcess] = []
    starting = threading.Thread(
        target=lambda: started.append(ServerProcess(repository, ["--streams", str(config)]).start(home))
    )
    starting.start()
    try:
        rate = drain_rate(client, stream, records, 600)
    finally:
        starting.join()
    return rate, started[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="records pre-filled per form and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of stream and HTTP points")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="the HTTP point's and the paced run's length"
    )
    parser.add_argument("--fault-records", type=int, default=3000, help="records of each fault run")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs in each fault run")
    args = parser.parse_args(argv)
    lines = [f"# Streams on Redis Streams: `{MODEL}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", ""]
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    lines.append(f"load average at the start: {load} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        repository = write_conch_repository(home / "models", [MODEL])
        with running_redis(home / "redis") as broker:
            lines += throughput_and_latency(home, repository, broker, args)
            lines += fault_runs(home, repository, broker, args)
    lines.append(f"\nload average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    text = "\n".join(lines) + "\n"
    publish(text, "streams", RESULTS)
    return 0


def throughput_and_latency(
    home: Path, repository: Path, broker: RedisServer, args: argparse.Namespace
) -> list[str]:
    """``--rounds`` rounds, each: JSON rows drained by one server, then the binary form by another,
    which then takes the HTTP point; the rounds repeat because the machine's load moves (a shared
    2-core machine gave 0.9x and 1.98x an hour apart)."""
    client = broker.client()
    lines = ["", "## Throughput: pre-filled stream, first read to last acknowledgement", ""]
    lines.append(f"- records per form and round: {args.records}, in the stream before the server started")
    ratios, binary_rates = [], []
    for round_ in range(1, args.rounds + 1):
        rates: dict[str, float] = {}
        for form in ("json", "binary"):  # binary last: its server also takes the HTTP point
            stream = f"{form}{round_}-in"
            config = write_streams_yaml(
                home / f"{form}{round_}.yaml", broker.url, [stream_entry(MODEL, stream)]
            )
            prefill(client, stream, args.records, form)
            rates[form], server = drained_by_new_server(
                repository, config, client, stream, args.records, home
            )
            if form == "json":
                server.stop()
        try:
            http = loadgen.perf_analyzer_point(
                loadgen.PerfTarget(MODEL, server.http_url, "http"), 32, args.seconds, home
            )
        finally:
            server.stop()
        dead = sum(client.xlen(f"{form}{round_}-dlq") for form in ("json", "binary"))
        client.delete(*(f"{form}{round_}-{part}" for form in ("json", "binary") for part in ("in", "out")))
        load = os.getloadavg()[0]
        if not http.ok or not http.throughput:
            lines.append(
                f"- round {round_}: binary {rates['binary']:.0f} records/s, JSON rows "
                f"{rates['json']:.0f}; HTTP point failed: {http.failure}; load {load:.1f}"
            )
            continue
        ratios.append(rates["binary"] / http.throughput)
        binary_rates.append(rates["binary"])
        lines.append(
            f"- round {round_}: stream, tensor in the binary field **{rates['binary']:.0f} records/s**; "
            f"JSON rows {rates['json']:.0f} records/s; HTTP binary at 32 clients, same server "
            f"{http.throughput:.0f} inferences/s (P50 {http.p50_ms:.1f} ms, P99 {http.p99_ms:.1f} ms"
            f"{', ' + http.note if http.note else ''}); ratio **{ratios[-1]:.2f}x**, JSON rows "
            f"{rates['json'] / http.throughput:.2f}x; dead letters {dead}; load average {load:.1f}"
        )
    if ratios:
        lines.append(
            f"- ratio stream (binary) / HTTP binary, worst and median: **{min(ratios):.2f}x**, "
            f"{statistics.median(ratios):.2f}x (target >= 0.8x)"
        )
    rate = statistics.median(binary_rates) / 4 if binary_rates else 100.0
    spec = stream_entry(MODEL, "paced-in")
    config = write_streams_yaml(home / "paced.yaml", broker.url, [spec])
    server = ServerProcess(repository, ["--streams", str(config)]).start(home)
    try:
        latencies = paced_latencies(client, spec["input"], spec["results"], rate, args.seconds)
    finally:
        server.stop()
    cut = statistics.quantiles(latencies, n=100)
    return [
        *lines,
        "",
        f"## Latency, ingestion to result written: {rate:.0f} records/s (a quarter of the median), "
        f"{args.seconds:.0f} s",
        "",
        f"- records: {len(latencies)}; P50 {cut[49]:.1f} ms, P99 {cut[98]:.1f} ms, "
        f"max {max(latencies):.1f} ms",
    ]


def fault_runs(home: Path, repository: Path, broker: RedisServer, args: argparse.Namespace) -> list[str]:
    client = broker.client()
    row = {"INPUT0": [0.5] * MODELS[MODEL][0]}
    lines = ["", "## Faults", ""]
    for name in ("kill", "pair"):
        spec = stream_entry(MODEL, f"{name}-in")
        config = write_streams_yaml(home / f"{name}.yaml", broker.url, [spec], claim_idle_ms=2000)

        def start(config: Path = config) -> ServerProcess:
            return ServerProcess(repository, ["--streams", str(config)]).start(home)

        if name == "kill":
            counted = kill_and_restart(
                client,
                start,
                spec["input"],
                spec["results"],
                spec["dead_letter"],
                args.fault_records,
                args.kills,
                row,
            )
            lines.append(f"- kill and restart ({args.kills} SIGKILLs): {counted.line()}")
        else:
            seconds = max(10.0, args.fault_records / 200)
            counted, sharing = rebalance(
                client,
                start,
                spec["input"],
                spec["results"],
                spec["dead_letter"],
                args.fault_records,
                args.kills,
                seconds,
                row,
            )
            lines.append(
                f"- rebalance, two replicas, {args.kills} SIGKILLs each followed by a new replica, records "
                f"over {seconds:.0f} s: {counted.line()}; replicas answering before the first kill: {sharing}"
            )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
