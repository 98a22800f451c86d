"""docs/notebook-to-production.md, run as written: every ``python`` block and every ``$ `` command of
every ``console`` block, in order, in one empty folder.

``conch serve`` is started in the background (the guide says "in another terminal") on free ports,
which replace the guide's 8000/8001/8002 wherever the guide names them. The transcript of the whole
walk-through is written to ``guide-transcript.txt`` in the working folder and printed (``pytest -s``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.integration.server_process import ServerProcess

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "notebook-to-production.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Step:
    """One runnable thing in the guide: Python source, or one shell command."""

    kind: str  # "python" or "command"
    text: str


def guide_steps(markdown: str) -> list[Step]:
    steps = []
    for language, body in FENCE.findall(markdown):
        if language == "python":
            steps.append(Step("python", body))
        elif language == "console":
            steps += [Step("command", line[2:]) for line in body.splitlines() if line.startswith("$ ")]
    return steps


def test_the_guide_has_the_whole_walk_through() -> None:
    commands = [s.text.split()[:2] for s in guide_steps(GUIDE.read_text()) if s.kind == "command"]

    assert [c[1] for c in commands] == ["validate", "package", "install", "serve"]
    assert sum(s.kind == "python" for s in guide_steps(GUIDE.read_text())) == 3


def run_guide(steps: list[Step], folder: Path, python: Path) -> list[str]:
    """Every step in ``folder`` with ``python``'s conch; the transcript, also written to the folder."""
    transcript: list[str] = []
    server: ServerProcess | None = None
    try:
        for step in steps:
            if step.kind == "command" and step.text.startswith("conch serve"):
                server = _serve(step.text, folder, python)
                transcript.append(f"$ {step.text}\n(started; ready on {server.http_url})")
                continue
            text = _with_ports(step.text, server)
            output = _run(step, text, folder, python)
            transcript.append(
                f"$ {step.text}\n{output}" if step.kind == "command" else f">>> python\n{output}"
            )
    finally:
        if server is not None:
            server.stop()
        (folder / "guide-transcript.txt").write_text("\n\n".join(transcript) + "\n")
        print("\n\n".join(transcript))
    return transcript


def test_every_command_of_the_guide_runs(tmp_path: Path) -> None:
    transcript = run_guide(guide_steps(GUIDE.read_text()), tmp_path, Path(sys.executable))
    final_output = transcript[-1]

    frame_answers = transcript[-2]
    header = r"label\s+probabilities_0\s+probabilities_1\s+probabilities_2"
    assert re.search(header, frame_answers), frame_answers
    assert len(re.findall(r"^\d+\s+[012]\s+[\d.]+\s+[\d.]+\s+[\d.]+$", frame_answers, re.MULTILINE)) == 5
    labels = re.search(r"label: \[([012]) ([012])\]", final_output)
    assert labels is not None, final_output
    rows = re.findall(r"\[\s*([\d.e-]+)\s+([\d.e-]+)\s+([\d.e-]+)\s*\]", final_output)
    assert len(rows) == 2, final_output
    for row in rows:
        assert abs(sum(map(float, row)) - 1) < 2e-3
    assert (tmp_path / "production" / "wine" / "1" / "model.onnx").is_file()


def _run(step: Step, text: str, folder: Path, python: Path) -> str:
    if step.kind == "python":
        command = [str(python), "-c", text]
    else:
        words = shlex.split(text)
        assert words[0] == "conch", f"the guide's commands are conch commands: {text}"
        command = [str(python.with_name("conch")), *words[1:]]
    done = subprocess.run(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    output = done.stdout.strip()
    assert done.returncode == 0, f"guide step failed ({done.returncode}):\n{text}\n---\n{output}"
    return output


def _serve(command: str, folder: Path, python: Path) -> ServerProcess:
    words = shlex.split(command)
    assert words[:2] == ["conch", "serve"] and len(words) == 3, command
    return ServerProcess(folder / words[2], console_script=True, python=str(python)).start(folder)


def _with_ports(text: str, server: ServerProcess | None) -> str:
    if server is None:
        return text
    for guide_port, port in (
        ("8000", server.http_port),
        ("8001", server.grpc_port),
        ("8002", server.metrics_port),
    ):
        text = text.replace(f"localhost:{guide_port}", f"127.0.0.1:{port}")
    return text
