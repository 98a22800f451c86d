"""``conch serve --busy-poll-us``: lone calls are answered with the loop polling, and an idle server
stops polling once the window has passed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from tests.fixtures.onnx_models import add_sub_grpc_inputs, add_sub_model, write_repository
from tests.integration.server_process import ServerProcess


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100)


def test_lone_calls_are_answered_and_an_idle_server_stops_polling(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), None)})
    server = ServerProcess(root, ["--busy-poll-us", "200000"]).start(tmp_path)  # a 0.2 s window
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for value in range(1, 21):  # one client, each call after the answer before it
            result = client.infer("add-sub", add_sub_grpc_inputs(value=float(value)))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), np.full((1, 16), 2.0 * value))
        client.close()
        assert server.process is not None
        time.sleep(0.5)  # the window has passed

        before = cpu_seconds(server.process.pid)
        time.sleep(1.0)
        idle_cpu = cpu_seconds(server.process.pid) - before

        assert idle_cpu < 0.3, f"an idle server used {idle_cpu:.2f} s of CPU in 1 s: still polling?"
    finally:
        server.stop()
