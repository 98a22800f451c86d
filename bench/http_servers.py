"""``python -m bench.http_servers``: what the HTTP layer alone costs, uvicorn against granian and a raw
httptools protocol, with the same V2 handler behind each.

Why: at 32 HTTP clients on the overhead-bound model, uvicorn's request cycle was about 15 % of
conch's event loop (py-spy). Before replacing it, measure the candidates on the same work: each
server answers ``POST /v2/models/tiny/infer`` by decoding the V2 JSON body with orjson, turning the
input into a numpy array, and encoding a V2 JSON response of the same shape, so the figure is the
HTTP layer plus a fixed, small amount of Python. One process, one event loop thread each:

- ``uvicorn``: uvicorn's httptools protocol with uvloop, the ASGI cycle (what conch serves with);
- ``granian-asgi`` / ``granian-rsgi``: granian (Rust HTTP server), one worker, one runtime thread,
  uvloop, with its ASGI and its own RSGI interface;
- ``httptools``: an ``asyncio.Protocol`` on uvloop driving ``httptools.HttpRequestParser`` directly,
  no ASGI at all: the floor of a Python HTTP/1.1 server;
- ``conch``: conch's own server (``conch.http_server``, httptools with the ASGI call and
  conch's connection limits), what ``conch serve`` runs since these figures chose it.

wrk drives each at 1 and 32 connections in alternating rounds; the report gives requests/s and each
server's ratio to uvicorn, paired by round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench import loadgen
from bench.run import RESULTS, conch_revision, describe_machine, loadavg, write_report
from bench.servers import free_port

KINDS = ("uvicorn", "granian-asgi", "granian-rsgi", "httptools", "conch")
CONCURRENCIES = (1, 32)


def answer(body: bytes) -> bytes:
    """The V2 work every server does: decode, make the tensor, encode an answer of the same shape."""
    request = orjson.loads(body)
    first = request["inputs"][0]
    tensor = np.asarray(first["data"], dtype=np.float32).reshape(first["shape"])
    output = {
        "name": "OUTPUT0",
        "datatype": "FP32",
        "shape": list(tensor.shape),
        "data": tensor.ravel().tolist(),
    }
    return orjson.dumps({"model_name": "tiny", "model_version": "1", "outputs": [output]})


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    payload = answer(b"".join(chunks))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def rsgi_app(scope: Any, protocol: Any) -> None:
    payload = answer(await protocol())
    protocol.response_bytes(200, [("content-type", "application/json")], payload)


class RawProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive with httptools' parser and nothing else."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # uvloop's TCPTransport is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        payload = answer(b"".join(self.body))
        self.body.clear()
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(
            payload
        )
        self.transport.write(head + payload)


def serve(kind: str, port: int) -> None:
    """Run one server in this process until killed."""
    if kind == "uvicorn":
        import uvicorn

        uvicorn.run(
            asgi_app,
            host="127.0.0.1",
            port=port,
            loop="uvloop",
            http="httptools",
            log_level="error",
            access_log=False,
            lifespan="off",
        )
    elif kind == "httptools":
        import uvloop

        async def main() -> None:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(RawProtocol, "127.0.0.1", port, backlog=1024)
            await server.serve_forever()

        uvloop.run(main())
    elif kind == "conch":
        import uvloop

        from conch.http_server import HttpServer
        from conch.runtime.model_process import listen

        uvloop.run(HttpServer(asgi_app).serve([listen("127.0.0.1", port, "HTTP")]))
    else:
        raise ValueError(kind)


def command(kind: str, port: int) -> list[str]:
    if kind.startswith("granian"):
        interface = kind.split("-", 1)[1]
        app = "bench.http_servers:" + ("rsgi_app" if interface == "rsgi" else "asgi_app")
        return [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            interface,
            "--port",
            str(port),
            "--workers",
            "1",
            "--runtime-threads",
            "1",
            "--loop",
            "uvloop",
            "--log-level",
            "error",
            "--no-ws",
            app,
        ]
    return [sys.executable, "-m", "bench.http_servers", "--serve", kind, "--port", str(port)]


def wait_listening(port: int, timeout_s: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s:g} s")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.http_servers", description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=KINDS[0:1] + KINDS[3:], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    started = datetime.now(UTC)
    machine = describe_machine()
    rates: dict[tuple[str, int], dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="conch-bench-http-") as folder:
        workdir = Path(folder)
        body = workdir / "body.json"
        body.write_bytes(loadgen.infer_body("tiny"))
        for number in range(1, args.rounds + 1):
            for kind in KINDS if number % 2 else tuple(reversed(KINDS)):
                port = free_port()
                process = subprocess.Popen(
                    command(kind, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                try:
                    wait_listening(port)
                    url = f"http://127.0.0.1:{port}/v2/models/tiny/infer"
                    loadgen.run_wrk(url, body, 32, 1.0, workdir)  # warm-up
                    for clients in CONCURRENCIES:
                        result = loadgen.run_wrk(url, body, clients, args.seconds, workdir)
                        rates.setdefault((kind, clients), {})[number] = (
                            result.throughput if result.ok else 0.0
                        )
                        print(
                            f"round {number}, {kind}, c={clients}: {result.throughput:,.0f}/s "
                            f"p50 {result.p50_ms:.3f} ms ({result.failure or 'ok'})",
                            flush=True,
                        )
                finally:
                    process.terminate()
                    process.wait(timeout=20)
    machine.append(f"load average at the end: {loadavg()}")
    name = started.strftime("%Y-%m-%d-%H%M%S") + "-http-servers.md"
    write_report(render(rates, args, started, machine), args.results_dir, name, "bench.http_servers")
    return 0


def render(
    rates: dict[tuple[str, int], dict[int, float]],
    args: argparse.Namespace,
    started: datetime,
    machine: Sequence[str],
) -> str:
    lines = [
        "# The HTTP layer alone: uvicorn, granian, raw httptools, conch's server, "
        + started.strftime("%Y-%m-%d %H:%M UTC")
        + "\n",
        "Requests/s, median round [lowest-highest]; ratio to uvicorn paired by round (median).\n",
        "| server | " + " | ".join(f"c={c}" for c in CONCURRENCIES) + " |",
        "|---|" + "---|" * len(CONCURRENCIES),
    ]
    for kind in KINDS:
        cells = []
        for clients in CONCURRENCIES:
            found = rates.get((kind, clients), {})
            base = rates.get(("uvicorn", clients), {})
            if not found:
                cells.append("-")
                continue
            values = list(found.values())
            paired = [found[n] / base[n] for n in found if base.get(n)]
            ratio = f", {statistics.median(paired):.2f}x" if paired else ""
            cells.append(f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]{ratio}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += [
        "\n## Machine\n",
        *(f"- {line}" for line in machine),
        f"- conch {conch_revision()}",
        "\n## Method\n",
        f"- wrk -t1 -cC -d{max(1, round(args.seconds))}s POSTing one tiny V2 JSON body; "
        f"{args.rounds} round(s), "
        "order reversed every other round; each server one process, one event loop thread",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
