"""The profiling benches' sample counting (``bench.py_spy``) on py-spy's raw format, and the report
file ``bench.report.publish`` writes."""

from __future__ import annotations

from pathlib import Path

from bench.py_spy import count_samples
from bench.report import publish

AREAS = (("ONNX Runtime", ("onnxruntime",)), ("event loop", ("asyncio",)))
RAW = "\n".join(
    [
        "process 7:main;run (asyncio/base_events.py:600);infer (onnxruntime/session.py:220) 30",
        "process 7:main;run (asyncio/base_events.py:600);select (selectors.py:468) 10",
        "process 7:main;other (conch/x.py:1) 5",
        "a line that is not a sample",
    ]
)


def test_each_sample_counts_in_the_area_of_its_innermost_frame_that_has_one() -> None:
    areas, functions, total = count_samples(RAW, AREAS)
    assert total == 45
    assert areas == {"ONNX Runtime": 30, "event loop": 10, "other": 5}
    assert functions["infer (onnxruntime/session.py:220)"] == 30


def test_a_report_is_written_with_a_timestamped_name(tmp_path: Path) -> None:
    path = publish("# figures\n", "a-bench", tmp_path / "results")
    assert path.parent == tmp_path / "results" and path.name.endswith("-a-bench.md")
    assert path.read_text() == "# figures\n"
