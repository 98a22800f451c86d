"""Streams under faults, against a real redis-server: the broker stopped and started mid-stream, the
broker out of memory (``maxmemory`` with ``noeviction``), SIGTERM, SIGKILL and a restart, and two
replicas of one group with one killed. Nothing is lost; duplicates come only from entries read and not
yet acknowledged.

Small runs (a few hundred records); the tests marked ``streams_soak`` run them long
(``pytest -m streams_soak``).
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.fixtures import python_models as models
from tests.integration.redis_server import RedisServer, running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import (
    pending,
    produce,
    stream_entry,
    tally,
    wait_until,
    write_streams_yaml,
)
from tests.integration.stream_scenarios import answered, kill_and_restart, rebalance

pytestmark = pytest.mark.redis  # the program this file drives

#: The python fixtures' SLEEPY model sleeps its row's first value in milliseconds a request: a clock,
#: not arithmetic, so the streams are as slow on a fast processor (an ONNX model of eight 1024-wide
#: products answered 400 rows in 40 ms on an AMD EPYC, before a fault could land).
SLOW_CONFIG = models.ONE_IN_ONE_OUT.format(
    name="slow", max_batch_size=8, dtype="TYPE_FP32", instances=1, extra="dynamic_batching { }"
)
SLOW_ROW = {"IN": [5.0, 5.0, 5.0, 5.0]}
#: Small enough that a kill leaves a few dozen records unacknowledged, not hundreds.
MAX_IN_FLIGHT = 16


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis"), persist=True) as server:
        yield server


@pytest.fixture(scope="module")
def client(broker: RedisServer) -> redis.Redis:
    return broker.client()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    models.write_python_model(root, "slow", SLOW_CONFIG, models.SLEEPY)
    return root


@pytest.fixture(scope="module")
def serve_stream(
    tmp_path_factory: pytest.TempPathFactory, repository: Path, broker: RedisServer
) -> Iterator[Callable[[str], Callable[[], ServerProcess]]]:
    """``serve_stream("x-in")`` gives a function that starts a new server reading stream ``x-in``."""
    home = tmp_path_factory.mktemp("servers")
    started: list[ServerProcess] = []

    def for_stream(stream: str) -> Callable[[], ServerProcess]:
        config = write_streams_yaml(
            home / f"{stream}.yaml",
            broker.url,
            [stream_entry("slow", stream)],
            claim_idle_ms=1000,
            max_in_flight=MAX_IN_FLIGHT,
            read_count=8,
        )

        def start() -> ServerProcess:
            server = ServerProcess(repository, ["--streams", str(config)]).start(home)
            started.append(server)
            return server

        return start

    yield for_stream
    for server in started:
        server.stop(signal.SIGKILL)


def test_broker_stopped_and_started_mid_stream_loses_nothing(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], broker: RedisServer, client: redis.Redis
) -> None:
    sent = produce(client, "outage-in", 400, SLOW_ROW)
    server = serve_stream("outage-in")()
    wait_until(lambda: answered(client, "outage-out", "outage-dlq") >= 40, 60, "40 answers")
    broker.stop()
    wait_until(lambda: server.request("GET", "/v2/health/ready").status == 503, 30, "not ready")
    reason = server.request("GET", "/v2/health/ready").body.decode()
    assert "outage-in" in reason and "unreachable" in reason
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        assert 'conch_stream_broker_up{stream="outage-in"} 0.0' in reply.read().decode()
    broker.start()
    client.connection_pool.disconnect()
    wait_until(lambda: tally(client, sent, "outage-out", "outage-dlq").lost == 0, 90, "every record answered")
    wait_until(lambda: server.request("GET", "/v2/health/ready").status == 200, 30, "ready again")
    counted = tally(client, sent, "outage-out", "outage-dlq")
    print("broker restart:", counted.line())
    assert counted.dead_letters == 0
    assert counted.duplicates <= MAX_IN_FLIGHT
    assert pending(client, "outage-in") == 0


def test_a_broker_out_of_memory_pauses_reading_acknowledges_nothing_and_resumes(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    # maxmemory reached with noeviction: Redis refuses XADD (results, dead letters) and still serves
    # XREADGROUP and XACK, so only conch's own rule keeps it from acknowledging what it could not write.
    sent = produce(client, "full-in", 300, SLOW_ROW)
    server = serve_stream("full-in")()
    wait_until(lambda: answered(client, "full-out", "full-dlq") >= 20, 60, "20 answers")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    try:
        frozen = answered(client, "full-out", "full-dlq")
        time.sleep(2.0)  # several write attempts
        assert answered(client, "full-out", "full-dlq") == frozen
        group = next(g for g in client.xinfo_groups("full-in") if g["name"] == b"conch")
        acknowledged = group["entries-read"] - group["pending"]
        assert acknowledged <= frozen, "an entry was acknowledged without its result written"
        assert 0 < group["pending"] <= MAX_IN_FLIGHT, "it went on reading while it could not write"
        status = server.request("GET", "/ui/status.json").json()
        stream = next(s for s in status["streams"] if s["stream"] == "full-in")
        assert "refuses writes" in stream["paused"]
    finally:
        client.config_set("maxmemory", 0)
    wait_until(lambda: tally(client, sent, "full-out", "full-dlq").lost == 0, 90, "every record answered")
    counted = tally(client, sent, "full-out", "full-dlq")
    print("broker out of memory:", counted.line())
    assert counted.dead_letters == 0 and counted.duplicates == 0
    wait_until(lambda: pending(client, "full-in") == 0, 30, "every entry acknowledged")


def test_sigterm_finishes_what_was_read_acknowledges_it_and_stops_reading(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    sent = produce(client, "term-in", 400, SLOW_ROW)
    server = serve_stream("term-in")()
    wait_until(lambda: answered(client, "term-out", "term-dlq") >= 40, 60, "40 answers")
    assert server.stop(signal.SIGTERM) == 0
    counted = tally(client, sent, "term-out", "term-dlq")
    assert pending(client, "term-in") == 0, "a record read before SIGTERM was left unacknowledged"
    assert counted.duplicates == 0 and counted.dead_letters == 0
    assert counted.results < len(sent), "it went on reading after SIGTERM"
    group = next(g for g in client.xinfo_groups("term-in") if g["name"] == b"conch")
    assert group["entries-read"] == counted.results  # read = answered: nothing read was dropped


def test_sigkill_and_restart_lose_nothing(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    counted = kill_and_restart(
        client, serve_stream("kill-in"), "kill-in", "kill-out", "kill-dlq", 400, kills=1, row=SLOW_ROW
    )
    print("kill and restart:", counted.line())
    assert counted.lost == 0 and counted.dead_letters == 0
    assert counted.duplicates <= MAX_IN_FLIGHT  # only what was read and not acknowledged
    assert len(counted.consumers) == 2, "the kill came after the first server had answered every record"


def test_two_replicas_share_a_group_and_claim_a_dead_ones_entries(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    counted, sharing = rebalance(
        client,
        serve_stream("pair-in"),
        "pair-in",
        "pair-out",
        "pair-dlq",
        200,
        1,
        2.0,
        SLOW_ROW,
        rejoin=False,
    )
    print("rebalance:", counted.line())
    assert sharing == 2, "one replica answered everything before the kill"
    assert counted.lost == 0 and counted.dead_letters == 0
    assert counted.duplicates <= MAX_IN_FLIGHT


#: The long runs (``pytest -m streams_soak``, a few minutes; deselected by default).
SOAK_KILLS = 5


@pytest.mark.streams_soak
def test_soak_five_sigkills_and_restarts_lose_nothing(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    start = serve_stream("soak-kill-in")
    counted = kill_and_restart(
        client, start, "soak-kill-in", "soak-kill-out", "soak-kill-dlq", 3000, SOAK_KILLS, SLOW_ROW
    )
    print("soak kill and restart:", counted.line())
    assert counted.lost == 0 and counted.dead_letters == 0
    assert counted.duplicates <= SOAK_KILLS * MAX_IN_FLIGHT


@pytest.mark.streams_soak
def test_soak_a_rebalance_with_four_replicas_killed_and_replaced_loses_nothing(
    serve_stream: Callable[[str], Callable[[], ServerProcess]], client: redis.Redis
) -> None:
    start = serve_stream("soak-pair-in")
    counted, sharing = rebalance(
        client, start, "soak-pair-in", "soak-pair-out", "soak-pair-dlq", 3000, 4, 20.0, SLOW_ROW
    )
    print("soak rebalance:", counted.line(), "sharing before the first kill:", sharing)
    assert sharing == 2
    assert counted.lost == 0 and counted.dead_letters == 0
    assert counted.duplicates <= 4 * MAX_IN_FLIGHT
