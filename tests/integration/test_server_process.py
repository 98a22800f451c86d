"""The test harness's server starts again on new ports when one it chose was taken before it bound."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.integration.server_process import ServerProcess


def test_a_taken_port_is_replaced(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        server = ServerProcess(None, grpc_port=port).start(tmp_path)
        try:
            assert server.grpc_port != port
            assert server.request("GET", "/v2/health/ready").status == 200
            logs = [log.read_text() for log in tmp_path.glob("*.log")]
            assert any(f"cannot listen on 127.0.0.1:{port}" in text for text in logs)
        finally:
            server.stop()
