"""Hypothesis fuzzing of the release readers: ``release.yaml`` and a release's JSON body
(``conch.release.spec``), and the state dir's saved releases (``conch.release.store``).

Any input reads or is a 400 saying why, quickly and in a message of bounded size (YAML anchors can
nest a value far larger than the file); a spec that reads writes back to the same spec; a model name
never names a state file outside the state dir.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from conch.core.errors import InvalidArgumentError
from conch.release.spec import spec_from_dict, spec_from_yaml, spec_to_json
from conch.release.state import Release
from conch.release.store import ReleaseStore
from tests.unit.fuzzing import FUZZ, JSON, decodes_or_refuses

duration = st.sampled_from(["10m", "90s", "1.5h", "0s", "-1m", "10", "1e400h", "nanh"]) | JSON
step = st.fixed_dictionaries(
    {},
    optional={
        "weight": st.integers(-5, 105) | JSON,
        "duration": duration,
        "shadow": st.booleans() | JSON,
        "pause": st.booleans() | JSON,
    },
)
gate = st.fixed_dictionaries(
    {},
    optional={
        "judge": st.sampled_from(["local", "prometheus", "x"]) | JSON,
        "prometheus_url": st.sampled_from(["http://p:9090", "file:///etc/passwd", ""]) | JSON,
        "min_requests": st.integers(-1, 300) | JSON,
        "failure_threshold": st.integers(-1, 3) | JSON,
        "compare": st.lists(st.text(max_size=8), max_size=3) | JSON,
        "max_error_rate_increase": st.floats(-1, 2) | JSON,
        "min_agreement": st.floats(-1, 2) | JSON,
    },
)
spec_body = st.fixed_dictionaries(
    {},
    optional={
        "candidate": st.integers(-1, 4) | JSON,
        "baseline": st.integers(-1, 4) | st.none() | JSON,
        "steps": st.lists(step, max_size=4) | JSON,
        "gate": gate | JSON,
        "on_failure": st.sampled_from(["rollback", "pause", "explode"]) | JSON,
        "unknown": JSON,
    },
)
MESSAGE_LIMIT = 4000


def _reads_or_refuses(read: Any) -> Any:
    started = time.monotonic()
    try:
        return decodes_or_refuses(read, InvalidArgumentError)
    finally:
        assert time.monotonic() - started < 2.0


@FUZZ
@given(spec_body)
def test_a_release_body_reads_and_writes_back_or_is_a_400(body: dict[str, Any]) -> None:
    spec = _reads_or_refuses(lambda: spec_from_dict(body))
    if spec is not None:
        assert spec_from_dict(spec_to_json(spec)) == spec
        assert spec_from_yaml(yaml.safe_dump(spec_to_json(spec))) == spec


@FUZZ
@given(st.text(max_size=200) | spec_body.map(lambda b: yaml.safe_dump(b, default_flow_style=True)))
def test_release_yaml_text_reads_or_is_a_400(text: str) -> None:
    _reads_or_refuses(lambda: spec_from_yaml(text))


@FUZZ
@given(
    st.integers(1, 9),
    st.sampled_from(["candidate", "baseline", "steps", "gate", "on_failure", "weight", "key"]),
)
def test_yaml_anchor_bombs_are_refused_quickly_in_a_short_message(depth: int, where: str) -> None:
    levels = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, depth)]
    bomb = "[" + ", ".join(levels) + "]"
    document = {
        "candidate": "candidate: 2\nsteps: [{weight: 5}]\n",
        "baseline": "candidate: 2\nsteps: [{weight: 5}]\n",
        "steps": "candidate: 2\n",
        "gate": "candidate: 2\nsteps: [{weight: 5}]\n",
        "on_failure": "candidate: 2\nsteps: [{weight: 5}]\n",
        "weight": "candidate: 2\n",
        "key": "candidate: 2\nsteps: [{weight: 5}]\n",
    }[where]
    if where == "weight":
        text = document + f"steps: [{{weight: {bomb}}}]\n"
    elif where == "key":
        text = document + f"? {bomb}\n: 1\n"
    else:
        text = document + f"{where}: {bomb}\n"
    started = time.monotonic()
    try:
        spec_from_yaml(text)
    except InvalidArgumentError as exc:
        assert len(exc.message) < MESSAGE_LIMIT, exc.message[:200]
    assert time.monotonic() - started < 2.0


def _saved_state() -> dict[str, Any]:
    spec = spec_from_dict({"candidate": 2, "baseline": 1, "steps": [{"weight": 10, "duration": "1m"}]})
    return Release.create(spec, 1000.0).to_json(1000.0)


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(_saved_state())), JSON, max_size=3), st.booleans())
def test_a_saved_release_reads_back_or_is_a_400(changes: dict[str, Any], drop: bool) -> None:
    data = _saved_state()
    for key, value in changes.items():
        if drop:
            data.pop(key, None)
        else:
            data[key] = value
    _reads_or_refuses(lambda: Release.from_json(data, 2000.0))


@FUZZ
@given(
    st.text(max_size=30) | st.sampled_from(["..", ".", "../x", "a/b", "a\\b", "x\x00", "..x", "/abs"]), JSON
)
def test_a_model_name_names_a_state_file_inside_the_state_dir_or_is_a_400(model: str, saved: Any) -> None:
    with tempfile.TemporaryDirectory() as work:
        store = ReleaseStore(Path(work) / "state")
        path = _reads_or_refuses(lambda: store.path_for(model))
        if path is None:
            return
        assert path.parent == store.state_dir and path.name.endswith(".release.json")
        store.state_dir.mkdir()
        path.write_text(json.dumps(saved))
        _reads_or_refuses(lambda: store.load(model, 2000.0))
