"""conch's own HTTP/1.1 server: httptools parsing on the event loop, the ASGI interface to the app.

Why not uvicorn: on the same V2 handler, a protocol driving httptools directly answered 3.6x uvicorn's
requests/s at 32 connections and 1.36x at one (``python -m bench.http_servers``); the difference is
uvicorn's per-request machinery (its request-response cycle, flow-control objects, two writes per
answer, a timer per request for conch's limits). This server keeps the ASGI call, so the app and its
tests are unchanged, and spends per request one task, one scope dict and one write.
"""

from conch.http_server.server import HttpServer

__all__ = ["HttpServer"]
