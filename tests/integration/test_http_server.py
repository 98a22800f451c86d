"""conch's HTTP/1.1 server (``conch.http_server``) on a loopback port, driven by raw sockets
and ``http.client``: keep-alive, pipelining, chunked bodies both ways, ``Expect: 100-continue``,
HEAD, HTTP/1.0, malformed requests, failing apps and a graceful stop.

The app behind it is a small ASGI echo, so each test sees exactly what the server did; conch's own
app on this server is covered by every other HTTP test.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop

from conch.frontends.http.limits import HttpLimits
from conch.http_server import HttpServer


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with what it was asked: method, path, query, body size; some paths behave badly."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    path = scope["path"]
    if path == "/fail":
        raise RuntimeError("secret internal detail")
    if path == "/silent":
        return
    if path == "/slow":
        await asyncio.sleep(0.5)
    if path == "/stream":
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    answer = {
        "method": scope["method"],
        "path": path,
        "query": scope["query_string"].decode(),
        "body": len(body),
        "version": scope["http_version"],
    }
    data = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


@dataclass
class Running:
    port: int
    server: HttpServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.shutdown)
        self.thread.join(timeout=10)


def start(limits: HttpLimits | None = None) -> Running:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    server = HttpServer(echo_app, limits)
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve([sock]),), daemon=True)
    thread.start()
    running = Running(sock.getsockname()[1], server, loop, thread)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", running.port), timeout=1).close()
            return running
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("the server did not start")


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    each = start()
    yield each
    each.stop()


def raw(port: int, data: bytes, until: bytes | None = None, timeout: float = 5) -> bytes:
    """Sends ``data`` and reads until the server closes (or ``until`` has been seen)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        received = b""
        while until is None or until not in received:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            received += chunk
        return received


def test_keep_alive_serves_many_requests_on_one_connection(running: Running) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
    for index in range(5):
        conn.request("POST", f"/v2/x?n={index}", body=b"a" * index)
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        assert reply.status == 200 and answer["query"] == f"n={index}" and answer["body"] == index
        assert reply.getheader("date")
    conn.close()


def test_pipelined_requests_are_answered_in_order(running: Running) -> None:
    requests = b"".join(
        b"POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (i, i, b"b" * i)
        for i in range(1, 4)
    )
    received = raw(running.port, requests + b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    bodies = [part.split(b"\r\n\r\n", 1)[1] for part in received.split(b"HTTP/1.1 200 OK")[1:]]
    paths = [json.loads(body[: body.index(b"}") + 1])["path"] for body in bodies]
    assert paths == ["/p1", "/p2", "/p3", "/last"]


def test_pipelined_whole_and_streamed_answers_keep_their_order(running: Running) -> None:
    """A whole answer's bytes wait for the end of the loop's pass (outbox.py), a stream's go at once:
    end to end, the stream still comes between the answers before and after it. (The next answer
    starts only after the pass's flush, so this holds even without ``write``'s own flush; the test
    below pins that one.)"""
    requests = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
    received = raw(running.port, requests + b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    first, stream, last = (received.index(marker) for marker in (b'"/first"', b"one,", b'"/last"'))
    assert first < stream < last
    assert b"4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n" in received


def ours(each: Any, conn: socket.socket) -> Any:
    """The server's side of the client socket ``conn`` (a readiness probe's may still be open)."""
    port = conn.getsockname()[1]
    return next((c for c in list(each.server.connections) if c.client and c.client[1] == port), None)


def accepted(each: Any, conn: socket.socket) -> None:
    """Waits until the server holds ``conn``'s connection."""
    deadline = time.monotonic() + 5
    while ours(each, conn) is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_write_made_at_once_follows_the_answer_waiting_in_the_outbox() -> None:
    """A refusal (written at once) in the same pass as an answer's last bytes (waiting in the outbox
    while other requests are answered), as when a pipelined request's bad bytes arrive before the pass
    that answered the one before ends: the client must get the answer first."""
    each = start()
    try:
        with socket.create_connection(("127.0.0.1", each.port), timeout=5) as conn:
            accepted(each, conn)

            def answer_then_refuse() -> None:
                connection = ours(each, conn)
                each.server.running = 2  # another request is being answered: the answer waits
                connection.write_last(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                assert len(each.server.outbox) == 1, "the answer should wait for the end of the pass"
                connection.refuse(400, "the next request is not valid")
                each.server.running = 0

            each.loop.call_soon_threadsafe(answer_then_refuse)
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
    finally:
        each.stop()
    assert received.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    assert b"HTTP/1.1 400 Bad Request" in received


def test_a_chunked_request_body_is_read_whole(running: Running) -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    received = raw(
        running.port,
        b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + body,
    )
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["body"] == 11


def test_expect_100_continue_gets_its_interim_answer_before_the_body(running: Running) -> None:
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as conn:
        conn.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert conn.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(b"abcd")
        answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200 OK") and b'"body": 4' in answer


def test_a_streamed_answer_without_a_length_is_chunked(running: Running) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
    conn.request("GET", "/stream")
    reply = conn.getresponse()
    assert reply.getheader("transfer-encoding") == "chunked"
    assert reply.read() == b"one,two,three"
    conn.request("GET", "/after-the-stream")  # the connection is still good
    assert json.loads(conn.getresponse().read())["path"] == "/after-the-stream"
    conn.close()


def test_head_has_the_length_but_no_body(running: Running) -> None:
    received = raw(running.port, b"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, rest = received.partition(b"\r\n\r\n")
    assert b"content-length:" in head.lower() and rest == b""


def test_head_of_a_streamed_answer_has_no_body_not_even_the_last_chunk(running: Running) -> None:
    received = raw(running.port, b"HEAD /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, rest = received.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and rest == b""


def test_http_1_0_closes_unless_asked_to_keep_alive(running: Running) -> None:
    closed = raw(running.port, b"GET /old HTTP/1.0\r\n\r\n")
    assert (
        b"connection: close" in closed.lower()
        and json.loads(closed.split(b"\r\n\r\n", 1)[1])["version"] == "1.0"
    )
    kept = raw(running.port, b"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", until=b"}", timeout=2)
    assert b"connection: keep-alive" in kept.lower()


def test_a_percent_encoded_path_is_decoded(running: Running) -> None:
    received = raw(
        running.port,
        b"GET /v2/models/my%20model/ready?x=%20 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    answer = json.loads(received.split(b"\r\n\r\n", 1)[1])
    assert answer["path"] == "/v2/models/my model/ready" and answer["query"] == "x=%20"


def test_a_malformed_request_gets_a_400_and_the_server_stays_up(running: Running) -> None:
    received = raw(running.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 Bad Request")
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["error"].startswith(
        "the request is not valid HTTP/1.1"
    )
    assert b"connection: close" in received.lower()
    ok = raw(running.port, b"GET /fine HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize("path", ["/fail", "/silent"])
def test_an_app_that_fails_or_never_answers_gives_a_500_without_details(running: Running, path: str) -> None:
    received = raw(running.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert received.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert b"secret" not in received and b"Traceback" not in received
    assert json.loads(received.split(b"\r\n\r\n", 1)[1]) == {"error": "internal server error"}


def test_stopping_finishes_the_answer_in_flight_and_closes_idle_connections() -> None:
    each = start()
    idle = socket.create_connection(("127.0.0.1", each.port), timeout=5)
    busy = socket.create_connection(("127.0.0.1", each.port), timeout=5)
    busy.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.1)
    each.loop.call_soon_threadsafe(each.server.shutdown)
    answer = busy.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in answer.lower()
    assert idle.recv(10) == b""  # closed by the server
    each.thread.join(timeout=10)
    assert not each.thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", each.port), timeout=1)
    idle.close()
    busy.close()


def test_a_lone_answer_is_written_at_once_and_one_among_others_waits_for_the_pass() -> None:
    """The outbox gathers the answers of a pass; a lone request's answer has none to go with."""
    each = start()
    try:
        with socket.create_connection(("127.0.0.1", each.port), timeout=5) as conn:
            accepted(each, conn)
            waited: list[bool] = []
            done = threading.Event()

            def answer(running: int) -> None:
                connection = ours(each, conn)
                each.server.running = running
                connection.write_last(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                waited.append(len(each.server.outbox) == 1)
                each.server.outbox.flush()
                each.server.running = 0
                done.set()

            for running in (1, 3):
                done.clear()
                each.loop.call_soon_threadsafe(answer, running)
                assert done.wait(5)
    finally:
        each.stop()
    assert waited == [False, True]
