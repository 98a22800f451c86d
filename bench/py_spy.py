"""py-spy for the profiling benches: sample a server's process (and its children) while a load runs,
then count the samples by area (``bench.streams_profile``, ``bench.python_backend_profile``)."""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: (area, marks: any of them in a frame's file or function puts the frame in the area).
Areas = Sequence[tuple[str, Sequence[str]]]


def area_of(stack: list[str], areas: Areas) -> str:
    """The area of a sample: the first area any of its frames belongs to, innermost frame first."""
    for frame in reversed(stack):
        for area, marks in areas:
            if any(mark in frame for mark in marks):
                return area
    return "other"


def count_samples(raw: str, areas: Areas) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Samples by area and by innermost function, from py-spy's raw (collapsed) output."""
    by_area: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        stack = stack_text.split(";")
        total += count
        by_area[area_of(stack, areas)] += count
        functions[stack[-1]] += count
    return by_area, functions, total


def sampled(pid: int, output: Path, rate: int, run: Callable[[], None], children: bool = False) -> str:
    """py-spy's raw samples of process ``pid`` (and its ``children``) while ``run()`` runs. py-spy is
    the one beside this interpreter, else on the PATH."""
    program = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    command = [program, "record", "--format", "raw", "--rate", str(rate), "--nonblocking"]
    command += ["--subprocesses"] * children + ["--pid", str(pid), "--output", str(output)]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        run()
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        _, errors = spy.communicate(timeout=60)
    raw = output.read_text() if output.exists() else ""
    if not raw:
        raise RuntimeError(f"py-spy wrote no samples: {errors.strip()[-500:]}")
    return raw
