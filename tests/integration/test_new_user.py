"""A new user's first hour, in order, on a fresh clone: the README's two commands and what follows them.

1. ``git clone`` the project and run ``make serve`` there: it must install the runtime dependencies
   only (no test tools, no scikit-learn or pandas), without setuptools' licence deprecation warning,
   and serve the bundled repository.
2. The README's calls (its curl lines and its Python block), run as written against that server, must
   print what the README says they print.
3. ``pip install .`` of the clone into a fresh virtual environment (not editable), then ``conch serve``
   and ``conch docs`` from another folder: the package must carry its example repository and guides.
4. In that environment, with the exporters' extra added, the notebook guide on ``load_wine`` as it
   comes, every step as written.

It installs real packages (from pip's cache after the first run), so it takes a few minutes; it is the
one test that sees the project as a stranger does, with nothing of this checkout's ``.venv``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from tests.integration.server_process import ServerProcess, free_port
from tests.integration.test_guide import GUIDE, guide_steps, run_guide

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
INSTALL_TIMEOUT = 900
#: Packages that serving must not pull in (``make test`` and the exporters' extra bring them).
NOT_FOR_SERVING = ("pytest", "ruff", "mypy", "sklearn", "pandas", "skl2onnx", "torch")


def test_a_new_user_clones_serves_calls_installs_and_follows_the_guide(tmp_path: Path) -> None:
    clone = tmp_path / "conch"
    _run(["git", "clone", "-q", str(ROOT), str(clone)], tmp_path)

    ports = {
        "CONCH_HTTP_PORT": free_port(),
        "CONCH_GRPC_PORT": free_port(),
        "CONCH_METRICS_PORT": free_port(),
    }
    make_log = tmp_path / "make-serve.log"
    served = _start_make_serve(clone, ports, make_log)
    try:
        _wait_ready(ports["CONCH_HTTP_PORT"], served, make_log)
        _check_lean_install(clone / ".venv" / "bin" / "python", make_log.read_text())
        _run_readme_calls(clone / ".venv" / "bin" / "python", ports, tmp_path)
    finally:
        os.killpg(served.pid, signal.SIGTERM)
        served.wait(30)

    venv = tmp_path / "fresh-venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    pip = _run([str(venv / "bin" / "pip"), "install", "-q", str(clone)], tmp_path, timeout=INSTALL_TIMEOUT)
    assert "BuildBackendWarning" not in pip, pip  # setuptools' licence and package-data warnings
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _serve_installed(venv, elsewhere)
    guide = _run([str(venv / "bin" / "conch"), "docs", "notebook-to-production"], elsewhere)
    assert guide.startswith("# From notebook to production"), guide[:200]

    _run([str(venv / "bin" / "pip"), "install", "-q", f"{clone}[export]"], tmp_path, timeout=INSTALL_TIMEOUT)
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    transcript = run_guide(guide_steps(GUIDE.read_text()), notebook, venv / "bin" / "python")
    metadata = json.loads((notebook / "production" / "wine" / "1" / "metadata.json").read_text())
    assert metadata["column_inputs"] == {"od280/od315_of_diluted_wines": "od280_od315_of_diluted_wines"}
    assert re.search(r"label\s+probabilities_0", transcript[-2]), transcript[-2]


def _run(command: list[str], folder: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-4000:]}"
    return done.stdout


def _start_make_serve(clone: Path, ports: dict[str, int], log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CONCH_HOST": "127.0.0.1", **{k: str(v) for k, v in ports.items()}}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.Popen(
        ["make", "serve"],
        cwd=clone,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # make and the server it starts are stopped together
    )


def _wait_ready(port: int, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + INSTALL_TIMEOUT
    while time.monotonic() < deadline:
        assert process.poll() is None, (
            f"make serve exited with {process.returncode}:\n{log.read_text()[-4000:]}"
        )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"make serve was not ready in {INSTALL_TIMEOUT}s:\n{log.read_text()[-4000:]}")


def _check_lean_install(python: Path, make_output: str) -> None:
    probe = (
        "import importlib.util, json, sys; "
        "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))"
    )
    present = json.loads(_run([str(python), "-c", probe, *NOT_FOR_SERVING], python.parent))
    assert present == [], f"make serve installed {present}, which serving does not need"
    assert "project.license" not in make_output, make_output[-4000:]
    assert "loading model repository" in make_output, "the start-up log names the repository it serves"


def _readme_blocks() -> tuple[list[str], list[str], str]:
    """The "Call it" section's shell commands, its Python blocks, and the JSON it says infer answers."""
    text = README.read_text()
    section = text[text.index("## Call it") :]
    section = section[: section.index("\n## ", 1)]
    commands, python, answer = [], [], ""
    for language, body in FENCE.findall(section):
        if language == "python":
            python.append(body)
        elif language == "json":
            answer = body
        elif language == "":
            joined = body.replace("\\\n", " ")
            commands += [line for line in joined.splitlines() if line.startswith("curl ")]
    return commands, python, answer


def _with_ports(text: str, ports: dict[str, int]) -> str:
    for guide_port, key in (
        ("8000", "CONCH_HTTP_PORT"),
        ("8001", "CONCH_GRPC_PORT"),
        ("8002", "CONCH_METRICS_PORT"),
    ):
        text = text.replace(f"localhost:{guide_port}", f"127.0.0.1:{ports[key]}")
    return text


def _run_readme_calls(python: Path, ports: dict[str, int], folder: Path) -> None:
    commands, blocks, answer = _readme_blocks()
    assert len(commands) == 3 and blocks and answer, "the README's Call it section changed shape"
    ready, metadata, infer = (_run(["bash", "-c", _with_ports(c, ports)], folder) for c in commands)
    assert ready.strip() == "200"
    assert json.loads(metadata)["name"] == "iris-pipeline"
    got, promised = json.loads(infer), json.loads(answer)
    assert [o["name"] for o in got["outputs"]] == [o["name"] for o in promised["outputs"]]
    assert got["outputs"][0]["data"] == promised["outputs"][0]["data"]
    np.testing.assert_allclose(
        got["outputs"][1]["data"], promised["outputs"][1]["data"], rtol=1e-5, atol=1e-6
    )
    for block in blocks:
        output = _run([str(python), "-c", _with_ports(block, ports)], folder)
        for expected in re.findall(r"^print\(.*\)\s+#\s*(.+)$", block, re.MULTILINE):
            assert expected.strip() in output, f"README says {expected!r}; it printed:\n{output}"


def _serve_installed(venv: Path, folder: Path) -> None:
    server = ServerProcess(None, console_script=True, python=str(venv / "bin" / "python"))
    server.start(folder, timeout=120)
    try:
        reply = server.request("POST", "/v2/repository/index", b"{}")
        assert sorted(entry["name"] for entry in reply.json()) == [
            "digits-mlp",
            "iris-autoconfig",
            "iris-pipeline",
            "text-length",
        ]
        assert server.request("GET", "/v2/health/ready").status == 200
    finally:
        server.stop()
