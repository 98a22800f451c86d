"""``python -m bench.hostile_clients``: what a hostile client costs conch's HTTP server, in figures.

Three attacks, each against a fresh ``conch serve`` on loopback:

- ``unread``: 200 pipelined requests for ~1 MiB answers on one connection, none of them read. Prints
  the server's RSS (summed over its processes) before, at its highest while the client holds the
  connection, and 5 s after the client leaves.
- ``oversized``: a request to an unknown model declaring a 10 GiB body, the body streamed as fast
  as the socket takes it. Prints the bytes the client got into the connection before the answer came
  (the kernel's socket buffers, a few MiB on loopback, included) and how long the answer took.
- ``slow_body``: an attacker from 127.0.0.2 opens slow-body connections (10 bytes every 5 s each)
  up to twice ``--http-max-connections``, while normal clients from 127.0.0.1 infer. Prints the
  normal clients' success rate during the attack.

``--baseline DIR`` measures another checkout's ``conch`` package first (``git archive REV conch |
tar -x -C DIR``): the same attacks before a change. Figures go to stdout and, with ``--report``, to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import psutil
from onnx import TensorProto, helper, numpy_helper

from bench.peers import serve_conch
from bench.run import RESULTS, describe_machine, write_report
from bench.servers import ServerProcess

#: FP32 elements of the ``tile`` model's answer.
ANSWER_ELEMENTS = 262_144
DECLARED = 10 * 2**30


def tile_repository(root: Path) -> Path:
    """``tile``: INPUT0 [1, 4] FP32 tiled to [1, 262144], so a 100-byte request gets a 1 MiB answer
    (``1.0,2.0,...`` in JSON)."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["INPUT0", "repeats"], ["OUTPUT0"])],
        "tile",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, ANSWER_ELEMENTS])],
        initializer=[numpy_helper.from_array(np.array([1, ANSWER_ELEMENTS // 4], np.int64), "repeats")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (root / "tile" / "1").mkdir(parents=True)
    onnx.save(model, root / "tile" / "1" / "model.onnx")
    (root / "tile" / "config.pbtxt").write_text(
        'name: "tile"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [1, 4] }]\n'
        f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [1, {ANSWER_ELEMENTS}] }}]\n'
    )
    return root


#: Its answer is JSON, ~1 MiB, sent whole (a binary answer is streamed, and a stream already waited
#: for the client).
TILE_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
).encode()


def infer_request(host: str = "x") -> bytes:
    head = f"POST /v2/models/tile/infer HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(TILE_BODY)}\r\n"
    return head.encode() + b"Content-Type: application/json\r\n\r\n" + TILE_BODY


def tree_rss_mib(pid: int) -> float:
    """Resident memory of the process and its children, in MiB."""
    root = psutil.Process(pid)
    total = root.memory_info().rss
    for child in root.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def one_inference(port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> bool:
    """A normal client's inference on a fresh connection: True when it got its 1 MiB answer."""
    try:
        connection = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=timeout, source_address=(source, 0)
        )
        try:
            connection.request(
                "POST", "/v2/models/tile/infer", TILE_BODY, {"Content-Type": "application/json"}
            )
            reply = connection.getresponse()
            body = reply.read()
            return reply.status == 200 and len(body) > ANSWER_ELEMENTS * 3
        finally:
            connection.close()
    except OSError:
        return False


def unread_answers(server: ServerProcess, hold_secs: float) -> dict[str, float]:
    """200 pipelined requests for 1 MiB answers, none read, the connection held ``hold_secs``."""
    pid = server.process.pid  # type: ignore[union-attr]
    port = server.ports.http
    one_inference(port)
    time.sleep(1)
    before = tree_rss_mib(pid)
    highest = before
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    requests = infer_request() * 200
    sock.setblocking(False)
    sent, deadline = 0, time.monotonic() + hold_secs
    while time.monotonic() < deadline:
        if sent < len(requests):
            try:
                sent += sock.send(requests[sent : sent + 65536])
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break  # the server cut the connection off
        highest = max(highest, tree_rss_mib(pid))
        time.sleep(0.05)
    sock.close()
    time.sleep(5)
    return {
        "requests_sent": sent / len(infer_request()),
        "rss_before_mib": before,
        "rss_highest_mib": highest,
        "growth_mib": highest - before,
        "rss_5s_after_mib": tree_rss_mib(pid),
        "left_after_mib": tree_rss_mib(pid) - before,
        "served_after": float(one_inference(port)),
    }


def oversized_body(server: ServerProcess) -> dict[str, float]:
    """A 10 GiB body declared to an unknown model: bytes in before the answer, and its delay."""
    port = server.ports.http
    head = (
        f"POST /v2/models/no-such-model/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {DECLARED}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    state = {"sent": 0.0, "answered_after": -1.0, "status": 0.0}
    answered = threading.Event()
    started = time.monotonic()

    def read_answer() -> None:
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        state["answered_after"] = time.monotonic() - started
        if data.startswith(b"HTTP/1.1 "):
            state["status"] = float(data[9:12])
        answered.set()

    reader = threading.Thread(target=read_answer, daemon=True)
    reader.start()
    block = b"\0" * 65536
    sock.settimeout(1)
    while not answered.is_set() and state["sent"] < DECLARED and time.monotonic() - started < 60:
        try:
            state["sent"] += sock.send(block)
        except TimeoutError:
            continue
        except OSError:
            break
    answered.wait(30)
    sock.close()
    return {
        "bytes_in_before_answer_mib": state["sent"] / 2**20,
        "answer_secs": state["answered_after"],
        "status": state["status"],
        "served_after": float(one_inference(port)),
    }


def slow_body(server: ServerProcess, cap: int, secs: float) -> dict[str, float]:
    """Slow-body connections from 127.0.0.2 (twice the cap) while 127.0.0.1 infers for ``secs``."""
    port = server.ports.http
    head = (
        infer_request()
        .split(b"\r\n\r\n")[0]
        .replace(f"Content-Length: {len(TILE_BODY)}".encode(), b"Content-Length: 100000")
    )
    stop = threading.Event()
    attackers: list[socket.socket] = []

    def attack() -> None:
        while not stop.is_set():
            while len(attackers) < 2 * cap and not stop.is_set():
                try:
                    sock = socket.create_connection(
                        ("127.0.0.1", port), timeout=2, source_address=("127.0.0.2", 0)
                    )
                    sock.sendall(head + b"\r\n\r\n")
                    attackers.append(sock)
                except OSError:
                    time.sleep(0.05)
            for sock in list(attackers):
                try:
                    sock.sendall(b"0123456789")
                except OSError:
                    attackers.remove(sock)
                    sock.close()
            stop.wait(5)
        for sock in attackers:
            sock.close()

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    time.sleep(3)  # the attack takes the slots first
    outcomes: list[bool] = []
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        outcomes.append(one_inference(port, timeout=5))
        time.sleep(0.1)
    stop.set()
    attacker.join(timeout=30)
    return {
        "normal_requests": float(len(outcomes)),
        "success_rate": sum(outcomes) / max(1, len(outcomes)),
        "attacker_connections_at_end": float(len(attackers)),
    }


CASES: dict[str, Callable[[ServerProcess, argparse.Namespace], dict[str, float]]] = {
    "unread": lambda server, args: unread_answers(server, args.hold_secs),
    "oversized": lambda server, args: oversized_body(server),
    "slow_body": lambda server, args: slow_body(server, args.max_connections, args.attack_secs),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)}; all when none is named")
    parser.add_argument("--baseline", type=Path, help="also serve this checkout's conch package, first")
    parser.add_argument("--hold-secs", type=float, default=15.0)
    parser.add_argument("--attack-secs", type=float, default=30.0)
    parser.add_argument("--max-connections", type=int, default=100)
    parser.add_argument("--report", action="store_true", help="write the figures to bench/results/")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"no case {', '.join(sorted(unknown))}; choose from {', '.join(CASES)}")
    started = datetime.now(UTC)
    sources: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline is not None:
        sources.insert(0, (f"baseline {args.baseline}", args.baseline.resolve()))
    lines = [f"# Hostile clients, {started.strftime('%Y-%m-%d %H:%M UTC')}", "", *describe_machine(), ""]
    with tempfile.TemporaryDirectory() as workdir:
        repository = tile_repository(Path(workdir) / "models")
        for case in args.cases or list(CASES):
            for index, (name, source) in enumerate(sources):
                extra = ["--http-max-connections", str(args.max_connections)]
                server = serve_conch(repository, Path(workdir) / f"{case}-{index}", extra=extra)
                server.cwd = source  # ``python -m`` puts the working folder first on the path
                with server:
                    figures = CASES[case](server, args)
                shown = ", ".join(f"{key} {value:.1f}" for key, value in figures.items())
                line = f"- {case}, {name}: {shown}"
                print(line, flush=True)
                lines.append(line)
    if args.report:
        stem = started.strftime("%Y-%m-%d-%H%M%S") + "-hostile-clients.md"
        write_report("\n".join(lines) + "\n", RESULTS, stem, " ".join(sys.argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
