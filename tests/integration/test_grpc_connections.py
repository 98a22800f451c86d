"""What one gRPC connection may hold of a real server: its streams, its silence, its pings and its age.

The server's side of HTTP/2 is read with a bare peer (``http2_peer``): the SETTINGS it announces, the
pings it sends and the GOAWAY frames that end a connection. Real tritonclient calls check that clients
that behave are not hurt: answered pings, unary calls across a connection's age, and a sequence
streamed over ``ModelStreamInfer`` that outlives it, where a short age grace cuts the same stream.
Cases that only wait run side by side (an answering and a silent peer; the kept and the cut stream),
so the file takes the longest wait once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.fixtures.sequence_models import accumulator_config, accumulator_model
from tests.integration.http2_peer import ACK, MAX_CONCURRENT_STREAMS, PING, Http2Peer
from tests.integration.server_process import ServerProcess

#: Short enough that every case here runs in a few seconds.
FAST_KEEPALIVE = ("--grpc-keepalive-time-secs", "1", "--grpc-keepalive-timeout-secs", "1")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models: dict[str, tuple[Any, str | None]] = {
        "acc": (accumulator_model(), accumulator_config("acc", idle_us=60_000_000)),
        "plain": (identity_model(TensorProto.FLOAT), None),
    }
    return write_repository(tmp_path_factory.mktemp("connections"), models)


@pytest.fixture(scope="module")
def keepalive_server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, *FAST_KEEPALIVE, env={"CONCH_GRPC_MAX_CONCURRENT_STREAMS": "7"})


@pytest.fixture(scope="module")
def aging_server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, "--grpc-max-connection-age-secs", "1")


@pytest.fixture(scope="module")
def graced_server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    """The aging server's age with a one-second grace: a call open past both is cut. Its gRPC port is
    served by a proxy process, so the limits are seen to cross to one."""
    return start_server(
        repository,
        "--proxies", "1",
        "--grpc-max-concurrent-streams", "7",
        "--grpc-max-connection-age-secs", "1",
        "--grpc-max-connection-age-grace-secs", "1",
    )  # fmt: skip


def plain_call(client: grpcclient.InferenceServerClient, value: float) -> float:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full([1, 4], value, np.float32))
    return float(client.infer("plain", [tensor]).as_numpy("OUTPUT0")[0, 0])


def sequence_step(
    client: grpcclient.InferenceServerClient, sequence_id: int, value: float, start: bool, end: bool
) -> None:
    tensor = grpcclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full([1, 1], value, np.float32))
    client.async_stream_infer(
        "acc", [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end
    )


def test_every_connection_is_told_the_default_stream_limit(aging_server: ServerProcess) -> None:
    peer = Http2Peer(aging_server.grpc_port)
    try:
        assert peer.settings().get(MAX_CONCURRENT_STREAMS) == 1024
    finally:
        peer.close()


@pytest.mark.parametrize("mode", ["in-process", "proxy process"])
def test_the_stream_limit_holds_however_the_port_is_served(
    request: pytest.FixtureRequest,
    start_server: Callable[..., ServerProcess],
    repository: Path,
    mode: str,
) -> None:
    server = request.getfixturevalue("keepalive_server" if mode == "in-process" else "graced_server")
    peer = Http2Peer(server.grpc_port)
    try:
        assert peer.settings().get(MAX_CONCURRENT_STREAMS) == 7  # the same options carry keepalive and age
    finally:
        peer.close()


def test_a_peer_that_answers_pings_is_kept_and_one_that_does_not_is_dropped(
    keepalive_server: ServerProcess,
) -> None:
    silent = Http2Peer(keepalive_server.grpc_port, answer_pings=False)
    reader = threading.Thread(target=silent.read_for, args=(15,))
    reader.start()  # the silent peer is read meanwhile: both wait out the same keepalive
    peer = Http2Peer(keepalive_server.grpc_port)
    try:
        with grpcclient.InferenceServerClient(keepalive_server.grpc_url) as client:
            first = plain_call(client, 1.0)
            peer.read_for(3.5)  # the client's connection is pinged meanwhile too
            second = plain_call(client, 2.0)
    finally:
        peer.close()
        reader.join(20)
        silent.close()
    assert (first, second) == (1.0, 2.0)
    assert peer.closed_at is None and not peer.goaways()
    # Past the two pings gRPC once allowed a connection without data: an idle peer is pinged for ever.
    assert len([each for each in peer.frames if each.kind == PING and not each.flags & ACK]) >= 3

    pings = [each.at for each in silent.frames if each.kind == PING]
    assert pings, "the server never pinged an idle connection"
    assert silent.closed_at is not None, "a peer that answers no ping still holds its connection"
    assert [g.goaway_reason for g in silent.goaways()] == ["ping_timeout"]
    assert silent.closed_at - pings[0] < 5  # the timeout is 1 s; a loaded machine gets slack


def test_a_ping_flood_is_sent_away(keepalive_server: ServerProcess) -> None:
    peer = Http2Peer(keepalive_server.grpc_port)
    try:
        peer.settings()
        peer.flood_pings(10)
        peer.read_for(5)
    finally:
        peer.close()
    assert [g.goaway_reason for g in peer.goaways()] == ["too_many_pings"]
    assert peer.closed_at is not None


def test_a_connection_past_its_age_is_sent_away(aging_server: ServerProcess) -> None:
    peer = Http2Peer(aging_server.grpc_port)
    try:
        peer.read_for(10)
    finally:
        peer.close()
    reasons = [(g.goaway_reason, g.at) for g in peer.goaways()]
    assert reasons and all(reason == "max_age" for reason, _ in reasons), reasons
    assert reasons[0][1] > 0.5  # gRPC spreads the age by up to a tenth either way
    assert peer.closed_at is not None


def client_ports(server_port: int) -> set[int]:
    """This host's ports with a TCP connection established to ``server_port`` (``/proc/net/tcp*``)."""
    ports = set()
    lines = [
        *Path("/proc/net/tcp").read_text().splitlines()[1:],
        *Path("/proc/net/tcp6").read_text().splitlines()[1:],
    ]
    for line in lines:
        local, remote, state = line.split()[1:4]
        if state == "01" and int(remote.split(":")[1], 16) == server_port:
            ports.add(int(local.split(":")[1], 16))
    return ports


def test_unary_calls_keep_working_across_the_connections_age(aging_server: ServerProcess) -> None:
    answers = []
    seen: set[int] = set()
    moved = 0  # answers when the client was first seen on a second connection
    with grpcclient.InferenceServerClient(aging_server.grpc_url) as client:
        deadline = time.monotonic() + 2.5  # past two ages: the client moves to a new connection
        while time.monotonic() < deadline and len(answers) < 400:
            answers.append(plain_call(client, float(len(answers))))
            seen |= client_ports(aging_server.grpc_port)
            moved = moved or (len(answers) if len(seen) >= 2 else 0)
            if moved and len(answers) >= moved + 5:
                break  # five calls answered since the move
            time.sleep(0.01)
    assert answers == [float(index) for index in range(len(answers))]
    assert len(answers) >= 10
    assert len(seen) >= 2, "the client kept one connection: it never reached its age"
    assert len(answers) >= moved + 5, "calls after the client's move to a new connection were not answered"


class SequenceStream:
    """A tritonclient ``ModelStreamInfer`` stream holding one open sequence of the accumulator, and
    every answer or error its callback got, with the seconds since the stream opened."""

    def __init__(self, server: ServerProcess, sequence_id: int) -> None:
        self.sequence_id = sequence_id
        self.answers: queue.Queue[tuple[float, Any]] = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.opened = time.monotonic()
        self.client.start_stream(
            callback=lambda result, error: self.answers.put((time.monotonic() - self.opened, error or result))
        )
        self.step(1.0, start=True)

    def step(self, value: float, start: bool = False, end: bool = False) -> None:
        sequence_step(self.client, self.sequence_id, value, start, end)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def test_the_default_grace_keeps_an_open_sequence_stream_and_a_short_grace_cuts_it(
    aging_server: ServerProcess, graced_server: ServerProcess
) -> None:
    """The same age (1 s) on both servers; the grace alone differs: none (the default) or 1 s."""
    kept, cut = SequenceStream(aging_server, 61), SequenceStream(graced_server, 62)
    try:
        first = kept.answers.get(timeout=10)[1]
        assert not isinstance(cut.answers.get(timeout=10)[1], Exception)
        # Past the age (1 s and its spread) and the short grace; a cut comes with its time.
        try:
            cut_at, error = cut.answers.get(timeout=8)
        except queue.Empty:
            raise AssertionError("a stream open past its age and a 1 s grace was not cut") from None
        # The kept stream is as old as the cut one, past the same age and grace, when it goes on.
        time.sleep(max(0.0, cut_at + 0.3 - (time.monotonic() - cut.opened)))
        kept.step(2.0)
        kept.step(3.0, end=True)
        rest = [kept.answers.get(timeout=10)[1] for _ in range(2)]
    finally:
        kept.close()
        cut.close()
    assert not [str(each) for each in [first, *rest] if isinstance(each, Exception)]
    sums = [float(each.as_numpy("OUTPUT").ravel()[0]) for each in [first, *rest]]
    assert sums == [1.0, 3.0, 6.0]

    assert isinstance(error, InferenceServerException), error
    assert error.status() == "StatusCode.UNAVAILABLE" and "max connection age" in str(error)
    assert cut_at > 1.5, f"cut at {cut_at:.2f} s: before the age (0.9 s at the soonest) and its 1 s grace"
