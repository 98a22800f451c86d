"""Hostile clients against a real ``conch serve``: request smuggling, header abuse, pipelining, slow
clients, answers never read and oversized bodies, each from raw sockets on loopback.

After every case the server answers a normal inference on a fresh connection, and the ``canary``
model, which only smuggled requests name, has never run. The cases that could hold memory (unread
answers, a 10 GiB body, a slow-body attack) run at once and end together: 5 s after, the RSS summed
over each server's processes is within 20 MB of where it was before them, so the 5 s are waited once.
Limits are set low so each case is quick; the minute-long slow-body attack is ``-m slow_clients``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fixtures.onnx_models import _build, identity_model, write_repository
from tests.integration.server_process import ServerProcess

SLOW_SECS = 1
REQUEST_SECS = 2  # above the 1 s the minimum rate's grace takes (SLOW_SECS), so each limit is seen
MIN_RATE = 2000
BODY_LIMIT = 1024 * 1024
WRITE_SECS = 2
RSS_SLACK_MB = 20
TILE = 262_144  # FP32 elements of the tile model's answer: ~1 MiB of JSON

BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0.5, 1.5, 2.5, 3.5]}]}
).encode()
CANARY = b"POST /v2/models/canary/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


def tile_model() -> onnx.ModelProto:
    """INPUT0 [1, 4] tiled to [1, TILE]: a 100-byte request, a ~1 MiB answer."""
    repeats = numpy_helper.from_array(np.array([1, TILE // 4], np.int64), "repeats")
    return _build(
        "tile",
        [helper.make_node("Tile", ["INPUT0", "repeats"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.FLOAT, [1, 4])],
        [("OUTPUT0", TensorProto.FLOAT, [1, TILE])],
        [repeats],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("hostile") / "models",
        {
            "identity": (identity_model(TensorProto.FLOAT), None),
            "canary": (identity_model(TensorProto.FLOAT), None),
            "tile": (tile_model(), None),
        },
    )


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(
        repository,
        "--proxies", "0",
        "--http-max-body-bytes", str(BODY_LIMIT),
        "--http-max-header-bytes", "8192",
        "--http-slow-client-timeout-secs", str(SLOW_SECS),
        "--http-request-timeout-secs", str(REQUEST_SECS),
        "--http-min-body-rate", str(MIN_RATE),
        "--http-write-timeout-secs", str(WRITE_SECS),
        "--http-restricted-api", "model-repository:x-admin-key=letmein",  # 403 from the head
    )  # fmt: skip


def infers(server: ServerProcess, source: str = "127.0.0.1") -> bool:
    """A normal inference on a fresh connection, from ``source``."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.http_port, timeout=10, source_address=(source, 0)
    )
    try:
        connection.request("POST", "/v2/models/identity/infer", BODY, {"Content-Type": "application/json"})
        reply = connection.getresponse()
        return reply.status == 200 and json.loads(reply.read())["outputs"][0]["data"] == [0.5, 1.5, 2.5, 3.5]
    except OSError:
        return False
    finally:
        connection.close()


def canary_runs(server: ServerProcess) -> int:
    stats = server.request("GET", "/v2/models/canary/stats").json()["model_stats"][0]
    return int(stats["inference_count"]) + int(stats["inference_stats"]["fail"]["count"])


@pytest.fixture(autouse=True)
def still_serving(server: ServerProcess) -> Iterator[None]:
    yield
    assert infers(server), "the server did not answer a normal inference after the case"
    assert canary_runs(server) == 0, "a smuggled request ran"


def server_rss_mb(server: ServerProcess) -> float:
    assert server.process is not None
    root = psutil.Process(server.process.pid)
    total = root.memory_info().rss
    for child in root.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 1e6


def exchange(server: ServerProcess, data: bytes, timeout: float = 10.0, source: str = "127.0.0.1") -> bytes:
    """Sends ``data`` on a fresh connection and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout, (source, 0)) as sock:
        with contextlib.suppress(OSError):  # refused and closed while we sent: its answer is still there
            sock.sendall(data)
        return read_all(sock)


def statuses(answer: bytes) -> list[int]:
    """The statuses of the answers in ``answer``, in order (a refusal's message may say HTTP/1.1 too)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


def read_all(sock: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return received


# Framing and smuggling: every one refused and closed, the smuggled canary request never run.

SMUGGLING = {
    "content-length and chunked": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "two content-lengths": b"Content-Length: 0\r\nContent-Length: 5\r\n\r\n",
    "chunked then another coding": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n",
    "space before the colon": b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "signed length": b"Content-Length: +0\r\n\r\n",
    "folded transfer-encoding": b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
    "chunk size overflow": b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
    "nul in a header": b"X-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("framing", list(SMUGGLING), ids=list(SMUGGLING))
def test_ambiguous_framing_is_refused_and_the_smuggled_request_never_runs(
    server: ServerProcess, framing: str
) -> None:
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
    answer = exchange(server, head + SMUGGLING[framing] + CANARY)
    assert statuses(answer) == [400], answer[:200]
    assert b"connection: close" in answer.lower()


# Headers.


@pytest.mark.parametrize(
    "request_bytes, status, says",
    [
        (b"GET /v2/health/live HTTP/1.1\r\n\r\n", 400, b"needs a Host header"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, b"more than one Host"),
        (b"GET /v2/health/live\r\n\r\n", 400, b"no HTTP version"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, b"8192"),
        (
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + b"X-H: 1\r\n" * 101 + b"\r\n",
            431,
            b"--http-max-headers",
        ),
    ],
    ids=["no host", "two hosts", "no version", "big header", "many headers"],
)
def test_bad_heads_are_refused_with_a_reason_and_closed(
    server: ServerProcess, request_bytes: bytes, status: int, says: bytes
) -> None:
    answer = exchange(server, request_bytes + CANARY)
    assert statuses(answer) == [status], answer[:200]
    assert says in answer


@pytest.mark.parametrize("where", ["extension", "trailer"])
def test_chunk_extensions_and_trailers_count_against_the_head_limit(
    server: ServerProcess, where: str
) -> None:
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    if where == "extension":
        body = b"4;ext=" + b"a" * (1024 * 1024) + b"\r\nabcd\r\n0\r\n\r\n"
    else:
        body = b"4\r\nabcd\r\n0\r\n" + b"X-Trailer: " + b"t" * 20_000 + b"\r\n\r\n"
    answer = exchange(server, head + body)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"chunk extensions and trailers" in answer


# Pipelining.


def test_an_h2c_upgrade_is_answered_as_http_1_1_and_the_next_pipelined_request_too(
    server: ServerProcess,
) -> None:
    upgrade = (
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    )
    started = time.monotonic()
    answer = exchange(
        server, upgrade + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert time.monotonic() - started < 5  # no wait for the idle timeout
    assert statuses(answer) == [200, 200]


def test_an_upgrade_with_a_body_is_refused(server: ServerProcess) -> None:
    upgrade = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
    answer = exchange(server, upgrade + b"Content-Length: %d\r\n\r\n" % len(CANARY) + CANARY)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Upgrade" in answer


def test_pipelined_requests_are_answered_in_order_and_a_bad_one_after_the_good_ones(
    server: ServerProcess,
) -> None:
    one = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        len(BODY),
        BODY,
    )
    answer = exchange(server, one * 20 + b"BROKEN\r\n\r\n" + CANARY)
    assert statuses(answer) == [200] * 20 + [400]


def answers_never_read_hold_little_and_the_client_is_cut_off(server: ServerProcess) -> None:
    """200 pipelined requests for ~1 MiB answers, none read: the server grows by less than
    RSS_SLACK_MB, and cuts the client off after the write timeout. (A memory case: run below.)"""
    tile = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    ).encode()
    one = b"POST /v2/models/tile/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        len(tile),
        tile,
    )
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        before = server_rss_mb(server)
        sock.sendall(one * 200)
        time.sleep(WRITE_SECS + 2)  # reads nothing: cut off after the write timeout
        grown = server_rss_mb(server) - before
        received = read_all(sock)
    assert grown < RSS_SLACK_MB, f"holding unread answers grew the server by {grown:.1f} MB"
    assert received.count(b"HTTP/1.1 200 OK") < 200  # cut off before it was sent them all


# Slow clients.


def trickle(
    server: ServerProcess, length: int, piece: bytes, every: float, most: float
) -> tuple[bytes, float]:
    """Declares a ``length``-byte body and sends ``piece`` every ``every`` seconds until cut off (or
    ``most`` seconds): the answer, and the seconds until the server closed."""
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=15) as sock:
        sock.sendall(head)
        started = time.monotonic()
        try:
            while time.monotonic() - started < most:
                sock.sendall(piece)
                time.sleep(every)
        except OSError:
            pass
        return read_all(sock), time.monotonic() - started


def test_a_trickled_body_is_cut_under_the_minimum_rate_and_a_steady_one_at_the_deadline(
    server: ServerProcess,
) -> None:
    """The two slow bodies at once (each only waits): 10 bytes every 0.3 s never stall but fall under
    the minimum rate; 5,000 bytes a second keep over it and are cut at the request deadline."""
    with ThreadPoolExecutor(2) as pool:
        trickled = pool.submit(trickle, server, 100_000, b"0123456789", 0.3, 10)
        steady = pool.submit(trickle, server, 1_000_000, b"x" * 1000, 0.2, 12)
        (slow_answer, slow_secs), (steady_answer, steady_secs) = trickled.result(), steady.result()
    assert slow_answer.startswith(b"HTTP/1.1 408 ") and b"--http-min-body-rate" in slow_answer, slow_answer
    assert slow_secs < 10
    assert steady_answer.startswith(b"HTTP/1.1 408 "), steady_answer
    assert b"--http-request-timeout-secs" in steady_answer
    assert REQUEST_SECS - 0.5 < steady_secs < 12


# Oversized bodies.


def stream_until_answered(server: ServerProcess, head: bytes) -> tuple[bytes, int, float]:
    """Sends ``head`` then zeros as fast as the socket takes them until an answer comes: the answer,
    the body bytes sent before it, and the seconds it took."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    answer: list[bytes] = []
    answered = threading.Event()

    def read() -> None:
        answer.append(read_all(sock))
        answered.set()

    sock.sendall(head)
    started = time.monotonic()
    threading.Thread(target=read, daemon=True).start()
    sent, block = 0, b"\0" * 65536
    try:
        while not answered.wait(0) and time.monotonic() - started < 10:
            sent += sock.send(block)
    except OSError:
        pass
    answered.wait(15)
    sock.close()
    return (answer[0] if answer else b""), sent, time.monotonic() - started


def answered_before_read(server: ServerProcess, path: str, status: int) -> None:
    """A 10 GiB body declared to ``path`` is answered ``status`` before the body is read."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {10 * 2**30}\r\n\r\n"
    answer, sent, seconds = stream_until_answered(server, head.encode())
    assert seconds < 5
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:100]
    assert b"connection: close" in answer.lower()
    assert sent < 64 * 2**20, f"{sent} bytes went in before the answer"  # socket buffers, not the body


@pytest.mark.parametrize(
    "path, status", [("/v2/models/no-such-model/infer", 404), ("/v2/repository/index", 403)]
)
def test_a_10_gib_body_refused_from_its_head_is_not_read(
    server: ServerProcess, path: str, status: int
) -> None:
    answered_before_read(server, path, status)


def test_no_100_continue_for_a_body_that_will_be_refused(server: ServerProcess) -> None:
    head = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
    )
    for path, length, status in ((b"identity", 10 * 2**30, 413), (b"no-such-model", 100, 404)):
        answer = exchange(server, head % (path, length))
        assert answer.startswith(b"HTTP/1.1 %d " % status) and b"100 Continue" not in answer


def test_a_chunked_body_over_the_limit_is_413(server: ServerProcess) -> None:
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"10000\r\n" + b" " * 65536 + b"\r\n"
    answer = exchange(server, head + chunk * (BODY_LIMIT // 65536 + 2))
    assert answer.startswith(b"HTTP/1.1 413 ") and b"--http-max-body-bytes" in answer


# The slow-body attack: connections held by one client while others keep being served.


@pytest.fixture(scope="module")
def capped(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    """Default time limits (a slow body lasts its 10 s grace) and a cap of 20 connections; 127.0.0.1
    is a trusted proxy, whose X-Real-Client header names the client."""
    return start_server(
        repository,
        "--proxies", "0",
        "--http-max-connections", "20",
        "--http-trusted-proxies", "127.0.0.1",
        "--http-client-ip-header", "X-Real-Client",
        "--access-log", "true",
    )  # fmt: skip


def test_a_trusted_proxy_names_the_client_and_anyone_else_is_who_it_is(capped: ServerProcess) -> None:
    for source, named in (("127.0.0.1", "203.0.113.9"), ("127.0.0.2", "203.0.113.8")):
        with socket.create_connection(("127.0.0.1", capped.http_port), 5, (source, 0)) as sock:
            sock.sendall(
                b"GET /v2/health/live?from=%s HTTP/1.1\r\nHost: x\r\nX-Real-Client: 198.51.100.1, %s\r\n"
                b"Connection: close\r\n\r\n" % (source.encode(), named.encode())
            )
            assert statuses(read_all(sock)) == [200]
    deadline = time.monotonic() + 5
    while "from=127.0.0.2" not in capped.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [line for line in capped.log().splitlines() if "GET /v2/health/live?from=" in line]
    assert any("203.0.113.9:0 - " in line and "from=127.0.0.1" in line for line in lines), lines
    assert any("127.0.0.2:" in line and "from=127.0.0.2" in line for line in lines), lines
    assert not any("203.0.113.8" in line for line in lines)  # an untrusted peer names no one


def slow_body_attack(server: ServerProcess, connections: int, secs: float) -> float:
    """``connections`` slow bodies from 127.0.0.2 (10 bytes every second each) while 127.0.0.1 infers
    on fresh connections for ``secs``: the share of its inferences that succeeded."""
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    stop, held = threading.Event(), []

    def attack() -> None:
        while not stop.is_set():
            while len(held) < connections and not stop.is_set():
                try:
                    sock = socket.create_connection(("127.0.0.1", server.http_port), 2, ("127.0.0.2", 0))
                    sock.sendall(head)
                    held.append(sock)
                except OSError:
                    time.sleep(0.05)
            for sock in list(held):
                try:
                    sock.sendall(b"0123456789")
                except OSError:
                    held.remove(sock)
                    sock.close()
            stop.wait(1)

    attacker = threading.Thread(target=attack)
    attacker.start()
    try:
        time.sleep(1)  # the attack holds the slots first
        outcomes = []
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            outcomes.append(infers(server))
            time.sleep(0.05)
    finally:
        stop.set()
        attacker.join(timeout=30)
        for sock in held:
            sock.close()
    return sum(outcomes) / len(outcomes)


# The cases that could hold memory, at once.


def test_unread_answers_a_10_gib_body_and_a_slow_body_attack_leave_no_memory_held(
    server: ServerProcess, capped: ServerProcess
) -> None:
    """Unread answers and a 10 GiB body (413 before it is read) on one server, and a slow-body attack
    on the capped one, through which other clients are all served: each case asserts its own
    outcome. They end within a second of each other; 5 s later each server's RSS is back within
    RSS_SLACK_MB of where it was before them."""
    servers = {"unread answers and the 10 GiB body": server, "the slow-body attack": capped}
    before = {name: server_rss_mb(each) for name, each in servers.items()}
    with ThreadPoolExecutor(2) as pool:
        unread = pool.submit(answers_never_read_hold_little_and_the_client_is_cut_off, server)
        attack = pool.submit(slow_body_attack, capped, 40, 3)
        time.sleep(WRITE_SECS + 1)  # the 10 GiB body, answered at once, ends with the other two
        answered_before_read(server, "/v2/models/identity/infer", 413)
        unread.result()
        assert attack.result() == 1.0, "other clients were refused during the slow-body attack"
    assert infers(capped)
    time.sleep(5)
    after = {name: server_rss_mb(each) for name, each in servers.items()}
    held = {name: f"{before[name]:.1f} -> {after[name]:.1f} MB" for name in servers}
    assert all(after[name] - before[name] < RSS_SLACK_MB for name in servers), held


@pytest.mark.slow_clients
def test_other_clients_are_served_through_a_long_slow_body_attack(capped: ServerProcess) -> None:
    assert slow_body_attack(capped, connections=200, secs=60) >= 0.99
