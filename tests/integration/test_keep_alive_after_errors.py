"""A request refused before its body was read (unknown model, wrong method, an unknown version)
leaves the kept-alive connection usable: the client's next request on the same socket is answered,
not reset."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.integration.server_process import ServerProcess

BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0.5, 1.5, 2.5, 3.5]}]}
).encode()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("repo"), {"identity": (identity_model(TensorProto.FLOAT), None)}
    )


def test_refusals_before_the_body_do_not_break_the_connection(server: ServerProcess) -> None:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    big = BODY.replace(b"[0.5, 1.5, 2.5, 3.5]", json.dumps(np.arange(20_000, dtype=float).tolist()).encode())
    refusals: list[tuple[str, str, bytes, int]] = [
        ("POST", "/v2/models/no-such-model/infer", BODY, 404),
        ("POST", "/v2/models/no-such-model/infer", big, 404),
        ("PUT", "/v2/models/identity/infer", big, 405),
        ("POST", "/v2/models/identity/versions/9/infer", BODY, 404),
    ]
    connection.connect()
    socket_used = connection.sock
    for _ in range(25):
        for method, path, body, status in refusals:
            connection.request(method, path, body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            assert answer.status == status
            assert not answer.will_close
            connection.request(
                "POST", "/v2/models/identity/infer", BODY, {"Content-Type": "application/json"}
            )
            answer = connection.getresponse()
            reply = json.loads(answer.read())
            assert answer.status == 200
            assert reply["outputs"][0]["data"] == [0.5, 1.5, 2.5, 3.5]
    assert connection.sock is socket_used  # never reconnected


@pytest.mark.parametrize(
    "chunks, limit, whole", [([b"ab", b"cd", b""], 10, True), ([b"abcdef"] * 3, 10, False)]
)
def test_what_is_left_of_a_body_is_read_up_to_the_limit(chunks: list[bytes], limit: int, whole: bool) -> None:
    import asyncio

    from conch.frontends.http.unread_body import TrackedReceive

    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    queue = iter(messages)

    async def receive() -> dict[str, object]:
        return next(queue)

    tracked = TrackedReceive(receive)
    assert asyncio.run(tracked.drain(limit)) is whole
    assert tracked.finished is whole
