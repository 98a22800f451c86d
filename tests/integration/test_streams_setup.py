"""``--streams`` over TLS only (``rediss://``, the broker's plain port off) with a password from a
secret file and ``--workers 2``: one consumer per worker process shares the group, and the password
shows nowhere (log, status page, metrics)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.fixtures.certificates import Certificates, write_certificates
from tests.fixtures.onnx_models import ADD_SUB_CONFIG, add_sub_model, write_repository
from tests.integration.redis_server import RedisServer, running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import produce, stream_entry, tally, wait_until, write_streams_yaml

pytestmark = pytest.mark.redis  # the program this file drives

SECRET = "s3cret-for-streams-only"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return write_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis"), password=SECRET, tls=certificates) as server:
        yield server


@pytest.fixture(scope="module")
def client(broker: RedisServer) -> redis.Redis:
    return broker.client()


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory, broker: RedisServer
) -> ServerProcess:
    home = tmp_path_factory.mktemp("setup")
    repository = write_repository(
        home / "models", {"add_sub": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "add_sub"))}
    )
    secret = home / "redis-password"
    secret.write_text(SECRET + "\n")
    config = write_streams_yaml(
        home / "streams.yaml",
        broker.url,
        [stream_entry("add_sub", "auth-in")],
        password_file=str(secret),
        tls_ca_file=str(broker.tls.ca) if broker.tls else None,
    )
    return start_server(repository, "--streams", str(config), "--workers", "2")


def test_each_worker_is_a_consumer_and_the_password_shows_nowhere(
    server: ServerProcess, client: redis.Redis, broker: RedisServer
) -> None:
    wait_until(lambda: len(client.xinfo_consumers("auth-in", "conch")) == 2, 30, "two consumers in the group")
    sent: list[str] = []
    for _ in range(20):  # in waves, so that both blocked readers get some
        sent += produce(client, "auth-in", 10)
        wait_until(lambda sent=sent: tally(client, sent, "auth-out", "auth-dlq").lost == 0, 30, "answered")
    counted = tally(client, sent, "auth-out", "auth-dlq")
    assert counted.lost == 0 and counted.duplicates == 0 and counted.dead_letters == 0
    assert len(counted.consumers) == 2, f"one worker answered everything: {counted.consumers}"
    status = server.request("GET", "/ui/status.json").body.decode()
    assert json.loads(status)["streams"][0]["stream"] == "auth-in"
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        metrics = reply.read().decode()
    for shown in (server.log(), status, metrics):
        assert SECRET not in shown
    assert f"rediss://127.0.0.1:{broker.port}" in server.log()  # the broker is named, by address only
