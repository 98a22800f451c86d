"""``conch serve --streams``: records in, results and dead letters out, against a real redis-server.

One broker and one server read five streams: rows and V2 bodies answered, bad records dead-lettered
while the stream goes on, a model the repository lacks, a results stream that refuses writes (reading
pauses and nothing is acknowledged), and a dead consumer's pending entries, claimed, one of them past
its deliveries (poison).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.onnx_models import ADD_SUB_CONFIG, add_sub_model, slow_identity_model, write_repository
from tests.integration.redis_server import RedisServer, running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import (
    ADD_SUB_ROW,
    entries,
    pending,
    produce,
    stream_entry,
    tally,
    wait_until,
    write_streams_yaml,
)

pytestmark = pytest.mark.redis  # the program this file drives

MAX_RECORD_BYTES = 4096
MAX_DELIVERIES = 2
#: A slow model whose queue holds two requests: a stream's 64-record reads overflow it at once.
QUEUED_CONFIG = """
name: "queued"
max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 2 } }
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def client(broker: RedisServer) -> redis.Redis:
    return broker.client()


@pytest.fixture(scope="module")
def dead_consumer_entries(client: redis.Redis) -> dict[str, str]:
    """Two entries a consumer that died had read: one once, one past the deliveries allowed."""
    client.xgroup_create("claimed-in", "conch", id="0", mkstream=True)
    row = json.dumps(ADD_SUB_ROW)
    once = client.xadd("claimed-in", {"data": row}).decode()
    client.xreadgroup("conch", "ghost", {"claimed-in": ">"}, count=1)
    poison = client.xadd("claimed-in", {"data": row}).decode()
    client.xreadgroup("conch", "ghost", {"claimed-in": ">"}, count=1)
    for _ in range(MAX_DELIVERIES):  # each claim is one more delivery
        client.xclaim("claimed-in", "conch", "ghost", 0, [poison])
    return {"once": once, "poison": poison}


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    broker: RedisServer,
    client: redis.Redis,
    dead_consumer_entries: dict[str, str],
) -> ServerProcess:
    home = tmp_path_factory.mktemp("streams")
    repository = write_repository(
        home / "models",
        {
            "add_sub": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "add_sub")),
            "queued": (slow_identity_model(), QUEUED_CONFIG),
        },
    )
    client.set("stuck-out", "a string where a stream should be")
    config = write_streams_yaml(
        home / "streams.yaml",
        broker.url,
        [
            stream_entry("add_sub", "rows-in"),
            stream_entry("add_sub", "bad-in"),
            stream_entry("fraud", "nomodel-in"),
            stream_entry("add_sub", "stuck-in"),
            stream_entry("add_sub", "claimed-in"),
            stream_entry("queued", "busy-in"),
        ],
        claim_idle_ms=500,
        max_deliveries=MAX_DELIVERIES,
        max_record_bytes=MAX_RECORD_BYTES,
    )
    return start_server(repository, "--streams", str(config))


def test_rows_and_v2_bodies_are_answered_into_the_results_stream(
    server: ServerProcess, client: redis.Redis
) -> None:
    sent = produce(client, "rows-in", 8)
    client.xadd(
        "rows-in",
        {
            "data": json.dumps(ADD_SUB_ROW),
            "id": "versioned",
            "data_version": "2026-01",
            "ingestion_timestamp": "2026-01-31T12:00:00Z",
        },
    )
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [2, 16], "data": [1.0] * 32},
            {"name": "INPUT1", "datatype": "FP32", "shape": [2, 16], "data": [3.0] * 32},
        ]
    }
    client.xadd("rows-in", {"data": json.dumps(body), "id": "two-rows"})
    header = {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": True}}],
    }
    tensors = np.full(16, 2.0, np.float32).tobytes() + np.full(16, 5.0, np.float32).tobytes()
    client.xadd("rows-in", {"data": json.dumps(header), "binary": tensors, "id": "binary"})
    wait_until(lambda: len(entries(client, "rows-out")) == 11, 30, "11 results")
    results = {json.loads(f[b"data"])["id"]: (f, json.loads(f[b"data"])) for f in entries(client, "rows-out")}
    fields, first = results["r0"]
    assert fields[b"entry"].decode() == sent[0]
    assert first["model"] == "add_sub" and first["model_version"] == "1"
    assert first["outputs"]["OUTPUT0"] == [1.5] * 16 and first["outputs"]["OUTPUT1"] == [0.5] * 16
    assert first["latency_ms"] >= 0 and "filled" in first and first["data_version"] is None
    versioned = results["versioned"][1]
    assert versioned["data_version"] == "2026-01"
    assert versioned["ingestion_timestamp"] == "2026-01-31T12:00:00Z"
    assert versioned["latency_ms"] > 1000  # freshness from the record's own timestamp
    assert results["two-rows"][1]["outputs"]["OUTPUT0"] == [[4.0] * 16] * 2
    binary_fields, binary_result = results["binary"]
    assert binary_result["outputs"]["OUTPUT0"] == [[7.0] * 16]
    described = {"datatype": "FP32", "shape": [1, 16], "binary_data_size": 64}
    assert binary_result["outputs"]["OUTPUT1"] == described
    assert np.frombuffer(binary_fields[b"binary"], np.float32).tolist() == [-3.0] * 16
    assert pending(client, "rows-in") == 0
    assert not entries(client, "rows-dlq")


def test_bad_records_go_to_dead_letters_and_the_stream_goes_on(
    server: ServerProcess, client: redis.Redis
) -> None:
    bad = {
        "malformed": {"data": "{not json"},
        "not an object": {"data": "[1, 2]"},
        "no data": {"payload": json.dumps(ADD_SUB_ROW)},
        "wrong type": {"data": json.dumps({"INPUT0": ["a"] * 16, "INPUT1": [0.5] * 16})},
        "missing input": {"data": json.dumps({"INPUT0": [1.0] * 16})},
        "unknown input": {"data": json.dumps({**ADD_SUB_ROW, "INPUT9": [1.0]})},
        "too large": {"data": json.dumps({**ADD_SUB_ROW, "note": "x" * MAX_RECORD_BYTES})},
        "bad timestamp": {"data": json.dumps(ADD_SUB_ROW), "ingestion_timestamp": "yesterday"},
    }
    ids = {name: client.xadd("bad-in", fields).decode() for name, fields in bad.items()}  # type: ignore[arg-type]
    after = produce(client, "bad-in", 1)
    wait_until(lambda: len(entries(client, "bad-dlq")) == len(bad), 30, "a dead letter per bad record")
    wait_until(lambda: len(entries(client, "bad-out")) == 1, 30, "the good record after them answered")
    letters = {f[b"entry"].decode(): f for f in entries(client, "bad-dlq")}
    expected = {
        "malformed": ("malformed", "not valid JSON"),
        "not an object": ("malformed", "must be a JSON object"),
        "no data": ("malformed", "no 'data' field"),
        "wrong type": ("contract", "INPUT0"),
        "missing input": ("contract", "INPUT1"),
        "unknown input": ("contract", "INPUT9"),
        "too large": ("too_large", f"limit of {MAX_RECORD_BYTES}"),
        "bad timestamp": ("malformed", "ingestion_timestamp"),
    }
    for name, (kind, words) in expected.items():
        letter = letters[ids[name]]
        assert letter[b"reason_class"].decode() == kind, name
        assert words in letter[b"reason"].decode(), (name, letter[b"reason"])
        assert letter[b"data"] == bad[name].get("data", "").encode()
    assert entries(client, "bad-out")[0][b"entry"].decode() == after[0]
    assert pending(client, "bad-in") == 0


def test_a_model_the_repository_lacks_is_a_dead_letter(server: ServerProcess, client: redis.Redis) -> None:
    produce(client, "nomodel-in", 2)
    wait_until(lambda: len(entries(client, "nomodel-dlq")) == 2, 30, "two dead letters")
    letter = entries(client, "nomodel-dlq")[0]
    assert letter[b"reason_class"] == b"unknown_model"
    assert b"fraud" in letter[b"reason"]


def test_an_unwritable_results_stream_pauses_reading_and_acknowledges_nothing(
    server: ServerProcess, client: redis.Redis
) -> None:
    sent = produce(client, "stuck-in", 5)
    wait_until(lambda: pending(client, "stuck-in") == 5, 30, "the records read")
    time.sleep(1.5)  # several write attempts
    assert pending(client, "stuck-in") == 5, "an entry was acknowledged without its result written"
    assert client.type("stuck-out") == b"string" and not client.exists("stuck-dlq")
    stuck = _stream_status(server, "stuck-in")
    assert "refuses writes" in stuck["paused"]
    assert stuck["records"].get("result", 0) == 0
    client.delete("stuck-out")
    wait_until(lambda: len(entries(client, "stuck-out")) == 5, 30, "the results once writable")
    assert pending(client, "stuck-in") == 0
    assert sorted(f[b"entry"].decode() for f in entries(client, "stuck-out")) == sorted(sent)


def test_a_dead_consumers_entries_are_claimed_and_poison_is_dead_lettered(
    server: ServerProcess, client: redis.Redis, dead_consumer_entries: dict[str, str]
) -> None:
    wait_until(
        lambda: pending(client, "claimed-in") == 0, 30, "the dead consumer's entries claimed and answered"
    )
    results = entries(client, "claimed-out")
    assert [f[b"entry"].decode() for f in results] == [dead_consumer_entries["once"]]
    letters = entries(client, "claimed-dlq")
    assert [f[b"entry"].decode() for f in letters] == [dead_consumer_entries["poison"]]
    assert letters[0][b"reason_class"] == b"poison"
    assert f"max_deliveries {MAX_DELIVERIES}".encode() in letters[0][b"reason"]


def test_a_full_batcher_queue_pauses_reading_and_no_record_is_refused(
    server: ServerProcess, client: redis.Redis
) -> None:
    sent = produce(client, "busy-in", 120, {"INPUT0": [1.0, 2.0, 3.0, 4.0]})
    wait_until(lambda: tally(client, sent, "busy-out", "busy-dlq").lost == 0, 60, "every record answered")
    counted = tally(client, sent, "busy-out", "busy-dlq")
    assert counted.dead_letters == 0 and counted.duplicates == 0
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    refused = 'nv_inference_request_failure{model="queued",reason="REJECTED",version="1"}'
    assert float(text.split(refused)[1].split()[0]) > 0, "the queue never filled: nothing was paused"


def test_metrics_status_page_and_readiness_show_each_stream(
    server: ServerProcess, client: redis.Redis
) -> None:
    produce(client, "rows-in", 3)
    wait_until(lambda: pending(client, "rows-in") == 0, 30, "the records answered")
    assert server.request("GET", "/v2/health/ready").status == 200
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    rows = (("model", "add_sub"), ("stream", "rows-in"))
    assert (
        samples[
            (
                "conch_stream_records_total",
                (("model", "add_sub"), ("outcome", "result"), ("stream", "rows-in")),
            )
        ]
        >= 14
    )
    assert samples[("conch_stream_broker_up", (("stream", "rows-in"),))] == 1
    assert samples[("conch_stream_latency_seconds_count", rows)] >= 14
    wait_until(lambda: _stream_status(server, "rows-in")["lag"] == 0, 10, "lag 0 once answered")
    bad = (("model", "add_sub"), ("reason", "malformed"), ("stream", "bad-in"))
    assert samples.get(("conch_stream_dead_letters_total", bad), 0) in (0, 4)  # 4 once the test above ran
    assert ("conch_stream_lag", rows) in samples
    status = _stream_status(server, "bad-in")
    assert status["model"] == "add_sub" and status["results"] == "bad-out" and status["broker_up"] is True
    assert "redis://" not in json.dumps(server.request("GET", "/ui/status.json").json())


def _stream_status(server: ServerProcess, stream: str) -> dict[str, object]:
    document = server.request("GET", "/ui/status.json").json()
    return next(s for s in document["streams"] if s["stream"] == stream)
