"""``python -m bench.app_cost``: what one HTTP JSON inference costs inside conch's app, layer by layer.

Why: at 32 wrk clients on ``tiny`` the server spends about 52 us of CPU a request and its event loop
is busy all the time, with no function above a few percent of a py-spy profile. This takes the
sockets and the HTTP parser away and drives the app itself (``HttpFrontend``, the server, the
dynamic batcher and ONNX Runtime) with C requests at once, as the event loop holds them under load,
so that the part of the 52 us that is conch's own Python can be timed to a tenth of a microsecond.

With ``--layers``, each line replaces one more layer by its result, computed once beforehand: the
difference between two lines is what that layer costs in place (interleaved with the other requests
of its batch, which costs more than the same code timed alone in a loop). The garbage collector is
set as ``conch serve`` sets it (``conch.runtime.garbage_collection.settle``): without that, the young
collections that walk the requests in flight cost as much as a layer.

Measured on the 2-core development VM at ``2857e0c``, ``tiny``, 32 requests at once (the median of 7
repeats): the whole app 33.1 us a request; without decoding 23.6 (decoding: 9.5); without the
server's inference as well (the batcher, ONNX Runtime, the checks and statistics) 11.5 (12.1); without
the frontends' shared finish 10.5 (1.0); without the reply's encoding 8.5 (2.0: what is left is the
ASGI shell, the tasks and ``asyncio.gather``). Under wrk the whole server took about 52 us, so the
HTTP server, the sockets and the loop's polling are the other ~19. ``--tree DIR`` times another
checkout's ``conch`` (``git worktree add DIR REV``), to compare two revisions run in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Layers ``--layers`` replaces, one more on each line, in the order a request meets them.
LAYERS = ("decode", "server inference", "frontend finish", "reply")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.app_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="a model of bench/models.py (default tiny)")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in the app at once")
    parser.add_argument("--requests", type=int, default=16_000, help="requests a repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layers", action="store_true", help="also time the app without each layer")
    parser.add_argument("--tree", help="time the conch package of this checkout instead")
    args = parser.parse_args(argv)
    if args.tree:
        sys.path.insert(0, args.tree)
    import uvloop

    with tempfile.TemporaryDirectory() as scratch:
        lines = uvloop.run(_measure(args, Path(scratch)))
    for line in lines:
        print(line)


async def _measure(args: argparse.Namespace, scratch: Path) -> list[str]:
    from bench.loadgen import infer_body
    from bench.models import write_conch_repository

    app, server = _serving(write_conch_repository(scratch / "repository", [args.model]))
    body = infer_body(args.model)
    stubs = await _Stubs.prepared(server, body, args.model)
    lines = []
    for replaced in range(len(LAYERS) + 1 if args.layers else 1):
        stubs.replace(LAYERS[:replaced])
        cost = await _cost(app, body, args)
        what = "the whole app" if not replaced else "without " + ", ".join(LAYERS[:replaced])
        lines.append(
            f"{what}: median {statistics.median(cost):.1f} us a request "
            f"[{min(cost):.1f}-{max(cost):.1f}], {args.concurrency} at once"
        )
    return lines


def _serving(repository: Path) -> tuple[Any, Any]:
    """The app and server of ``conch serve REPOSITORY``, loaded, with the collector set as it sets it."""
    from conch.core.usable_cores import usable_cores
    from conch.frontends.http.app import HttpFrontend
    from conch.lifecycle.loader import LoadOptions, ModelLoader
    from conch.lifecycle.model_control import ModelControl
    from conch.lifecycle.release_runner import release_controller
    from conch.models.served_models import ServedModels
    from conch.runtime import garbage_collection
    from conch.runtime.assembly import control_settings
    from conch.runtime.settings import ServeSettings
    from conch.server import InferenceServer, ServerOptions

    settings = ServeSettings(repository=repository)
    models = ServedModels(repository)
    loader = ModelLoader(LoadOptions(cpu_cores=usable_cores()))
    control = ModelControl(models, loader, control_settings(settings))
    releases = release_controller(models, control, repository.parent / "state")
    server = InferenceServer(models, ServerOptions(), control, releases)
    control.load_startup()
    server.started = True
    app = HttpFrontend(server)
    garbage_collection.settle()
    return app, server


class _Stubs:
    """Replaces layers of the request path by their results, computed once with the real layers."""

    def __init__(self, app_module: Any, server: Any, request: Any, response: Any) -> None:
        from conch.frontends.http import infer_codec

        self.app_module, self.server, self.codec = app_module, server, infer_codec
        self.real = (
            infer_codec.decode_request,
            server.infer,
            app_module.answer_request,
            app_module.infer_reply,
        )
        self.request, self.response = request, response

    @classmethod
    async def prepared(cls, server: Any, body: bytes, model: str) -> _Stubs:
        from conch.frontends.http import app as app_module
        from conch.frontends.http import infer_codec

        request = infer_codec.decode_request(body, None, model, "")
        return cls(app_module, server, request, await server.infer(request))

    def replace(self, layers: tuple[str, ...]) -> None:
        decode, infer, answer, reply = self.real
        request, response = self.request, self.response
        canned = (200, b"{}", [(b"content-type", b"application/json")])

        async def answered(*_args: Any, **_kwargs: Any) -> Any:
            return response

        self.codec.decode_request = (lambda *_a, **_k: request) if "decode" in layers else decode
        self.server.infer = answered if "server inference" in layers else infer
        self.app_module.answer_request = answered if "frontend finish" in layers else answer
        self.app_module.infer_reply = (lambda *_a: canned) if "reply" in layers else reply


async def _cost(app: Any, body: bytes, args: argparse.Namespace) -> list[float]:
    """CPU microseconds a request, one figure a repeat."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/v2/models/{args.model}/infer",
        "http_version": "1.1",
        "headers": [(b"host", b"localhost"), (b"content-type", b"application/json")],
        "query_string": b"",
        "client": ("127.0.0.1", 1),
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def one() -> None:
        await app(dict(scope), receive, send)

    rounds = max(1, args.requests // args.concurrency)
    for _ in range(50):  # warm: the pool's timing, the batcher's history
        await asyncio.gather(*[one() for _ in range(args.concurrency)])
    costs = []
    for _ in range(args.repeats):
        statuses.clear()
        started = time.process_time()
        for _ in range(rounds):
            await asyncio.gather(*[one() for _ in range(args.concurrency)])
        costs.append((time.process_time() - started) * 1e6 / (rounds * args.concurrency))
        if set(statuses) != {200}:
            raise SystemExit(f"bench.app_cost: answers other than 200: {sorted(set(statuses))}")
    return costs


if __name__ == "__main__":
    main()
