"""The release spec: ``release.yaml`` beside a model's versions, or the same fields in a JSON body.

Both sources go through :func:`spec_from_dict`, so a field means the same thing and is refused with the
same words however the release arrives (a ``git push`` synced by Argo CD, or ``POST
/v2/models/{m}/release``). Every refusal is an :class:`InvalidArgumentError` (HTTP 400) that names the
field, ``release.yaml: steps[1].weight ...``, because the person reading it has to find the line to fix.

The spec is only what was declared. Which version serves unversioned traffic today (the default
baseline), and whether the candidate is READY, are facts of the running server: the state machine
(:mod:`conch.release.state`) gets them from its driver.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal, cast

import yaml

from conch.core.errors import InvalidArgumentError, did_you_mean

Judge = Literal["local", "prometheus"]
OnFailure = Literal["rollback", "pause"]
OnInconclusive = Literal["pause", "rollback", "advance"]
ON_INCONCLUSIVE: tuple[OnInconclusive, ...] = ("pause", "rollback", "advance")
#: ``min_agreement`` when the gate leaves it out and the candidate has no recorded expected agreement
#: against the baseline: a routine retrain changes 0.5% of predictions, so 2% is plainly more than that.
DEFAULT_MIN_AGREEMENT = 0.98

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smh])")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Step:
    """One step: the candidate's share of unversioned requests, for how long, and whether it is shadowed.

    A pause step (``pause=True``) has no weight, duration or shadow of its own: it keeps the previous
    step's traffic as it was and waits for ``promote``. A step without a duration ends at the next check,
    which is what the last ``{weight: 100}`` of a release wants.
    """

    weight: int | None
    duration_s: float | None = None
    shadow: bool = False
    pause: bool = False
    #: Distinct identities (a token's ``sub``) that must approve the step before it ends.
    approvals: int = 0


@dataclass(frozen=True)
class GateSpec:
    """The gate's limits; every figure is judged by a sequential test (:mod:`conch.release.sequential`).

    - ``judge="local"``: a single replica judges its own traffic; no Prometheus is needed.
    - ``prometheus_url=None``: required only with ``judge="prometheus"``.
    - ``compare=None``: every output is compared.
    - ``min_agreement=None``: the candidate's recorded expected agreement with the baseline, less a
      margin (:mod:`conch.release.expected_agreement`), else :data:`DEFAULT_MIN_AGREEMENT`.
    - ``on_inconclusive="pause"``: what a step whose duration is over does when a bound still
      straddles its limit.
    """

    judge: Judge = "local"
    prometheus_url: str | None = None
    min_requests: int = 200  # answers of each version a step needs before it may pass
    failure_threshold: int = 2  # consecutive failed checks before on_failure
    compare: tuple[str, ...] | None = None
    max_error_rate_increase: float = 0.01  # candidate error rate - baseline error rate
    max_p95_increase: float = 0.20  # candidate P95 / baseline P95 - 1
    min_agreement: float | None = None  # share of compared requests whose predictions agree
    drift_threshold: float = 0.3  # drift_score = 1 - cosine(baseline output, candidate output)
    # Share of compared requests whose drift is above the threshold: a retrain that moves 0.5% of its
    # predictions drifts on as many rows, so the limit matches the 2% of DEFAULT_MIN_AGREEMENT.
    max_drift_fraction: float = 0.02
    on_inconclusive: OnInconclusive = "pause"
    # Candidate P95 / baseline P95 - 1 of the executions that answered: a doubled compute is +1.0,
    # and identical versions taking turns read within +-10% on a saturated 2-core server.
    max_compute_increase: float = 0.50


@dataclass(frozen=True)
class ReleaseSpec:
    """A declared release: ``baseline=None`` means the version serving unversioned traffic at the start."""

    candidate: int
    baseline: int | None
    steps: tuple[Step, ...]
    gate: GateSpec = GateSpec()
    on_failure: OnFailure = "rollback"
    #: Lets a candidate that an earlier release rejected be released again (recorded, audited).
    readmit: bool = False


#: What an error message shows of a value: a release.yaml's anchors and aliases can nest a list of 10
#: items 9 deep in a few hundred bytes, whose full repr is gigabytes (found by
#: tests/unit/release/test_fuzz_release.py); the start of it says what was wrong.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 3, 4, 4, 60, 60
_shown = _SHOWN.repr

_TOP_KEYS = ("candidate", "baseline", "steps", "gate", "on_failure", "readmit")
_STEP_KEYS = ("weight", "duration", "shadow", "pause", "approvals")
# (lowest, highest) of each float limit, both included; None: no upper bound.
_RATES: dict[str, tuple[float, float | None]] = {
    "max_error_rate_increase": (0.0, 1.0),
    "max_p95_increase": (0.0, None),
    "max_compute_increase": (0.0, None),
    "min_agreement": (0.0, 1.0),
    "drift_threshold": (0.0, 2.0),  # a cosine distance lies in [0, 2]
    "max_drift_fraction": (0.0, 1.0),
}
_GATE_KEYS = (
    "judge",
    "prometheus_url",
    "min_requests",
    "failure_threshold",
    "compare",
    *_RATES,
    "on_inconclusive",
)
#: Limits that may be left out (None): the release resolves them when it starts.
_RESOLVED_LATER = ("min_agreement",)


def spec_from_yaml(text: str, source: str = "release.yaml") -> ReleaseSpec:
    """The spec in a ``release.yaml`` file's text; ``source`` starts every error message."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise InvalidArgumentError(f"{source}: not valid YAML{where}: {problem}") from None
    return spec_from_dict(data, source)


def spec_from_dict(data: object, source: str = "release.yaml") -> ReleaseSpec:
    """The spec in a parsed document: a JSON body, or what :func:`spec_from_yaml` read."""
    top = _mapping(data, source, _TOP_KEYS)
    if "candidate" not in top:
        raise InvalidArgumentError(f"{source}: 'candidate' is required: the version being released")
    if "steps" not in top:
        raise InvalidArgumentError(
            f"{source}: 'steps' is required, for example [{{weight: 5, duration: 10m}}]"
        )
    candidate = _version(top["candidate"], f"{source}: candidate")
    baseline = None if top.get("baseline") is None else _version(top["baseline"], f"{source}: baseline")
    if baseline == candidate:
        raise InvalidArgumentError(
            f"{source}: baseline and candidate are both version {candidate}: a release moves traffic "
            "from one version to another"
        )
    on_failure = top.get("on_failure", "rollback")
    if on_failure not in ("rollback", "pause"):
        raise InvalidArgumentError(
            f"{source}: on_failure must be 'rollback' or 'pause', got {_shown(on_failure)}"
        )
    gate = _gate(top.get("gate"), source)
    readmit = _flag(top.get("readmit", False), f"{source}: readmit")
    steps = _steps(top["steps"], source)
    return ReleaseSpec(candidate, baseline, steps, gate, cast(OnFailure, on_failure), readmit)


def spec_to_json(spec: ReleaseSpec) -> dict[str, Any]:
    """The spec as JSON, with every field and default spelled out; :func:`spec_from_dict` reads it back."""
    steps: list[dict[str, Any]] = []
    for step in spec.steps:
        if step.pause:
            steps.append({"pause": True})
        else:
            duration = None if step.duration_s is None else format_duration(step.duration_s)
            steps.append({"weight": step.weight, "duration": duration, "shadow": step.shadow})
        if step.approvals:
            steps[-1]["approvals"] = step.approvals
    gate = spec.gate
    return {
        "candidate": spec.candidate,
        "baseline": spec.baseline,
        "steps": steps,
        "gate": {
            "judge": gate.judge,
            "prometheus_url": gate.prometheus_url,
            "min_requests": gate.min_requests,
            "failure_threshold": gate.failure_threshold,
            "compare": None if gate.compare is None else list(gate.compare),
            **{name: getattr(gate, name) for name in _RATES},
            "on_inconclusive": gate.on_inconclusive,
        },
        "on_failure": spec.on_failure,
        "readmit": spec.readmit,
    }


def parse_duration(value: object, field: str) -> float:
    """Seconds in ``90s``, ``10m`` or ``1.5h``; a bare number or any other unit is refused.

    A bare ``10`` could mean seconds or minutes, and a release that runs 60 times too long (or too short)
    is worse than a refusal, so the unit is required.
    """
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidArgumentError(
            f"{field} must be a number with a unit s, m or h, such as '90s', '10m' or '1.5h'; "
            f"got {_shown(value)}"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(
            f"{field} must be above 0, got {_shown(value)}; leave it out for a step that ends at once"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` in its largest whole unit (``600.0`` -> ``10m``); :func:`parse_duration` reads it back."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    # Positional (never 1e-05) and exact: the shortest repr of the float, so a round trip gives it back.
    return f"{format(Decimal(repr(seconds)), 'f')}s"


def _steps(value: object, source: str) -> tuple[Step, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError(f"{source}: steps must be a non-empty list of steps, got {_shown(value)}")
    steps: list[Step] = []
    last: tuple[int, int] | None = None  # (index, weight) of the last step with a weight
    for index, item in enumerate(value):
        field = f"{source}: steps[{index}]"
        step = _step(item, field)
        if step.weight is not None:
            if last is not None and step.weight <= last[1]:
                raise InvalidArgumentError(
                    f"{field}.weight ({step.weight}) must be above steps[{last[0]}].weight ({last[1]}): "
                    "the candidate's share only grows during a release"
                )
            last = (index, step.weight)
        steps.append(step)
    return tuple(steps)


def _step(item: object, field: str) -> Step:
    entry = _mapping(item, field, _STEP_KEYS)
    approvals = 0 if entry.get("approvals") is None else _count(entry["approvals"], f"{field}.approvals")
    return replace(_traffic(entry, field), approvals=approvals)


def _traffic(entry: dict[str, Any], field: str) -> Step:
    pause = _flag(entry.get("pause", False), f"{field}.pause")
    shadow = _flag(entry.get("shadow", False), f"{field}.shadow")
    if pause:
        extra = [key for key in ("weight", "duration") if entry.get(key) is not None]
        if shadow:
            extra.append("shadow")
        if extra:
            raise InvalidArgumentError(
                f"{field}: a pause step takes no {', '.join(repr(key) for key in extra)}: it keeps the "
                "previous step's traffic and waits for promote"
            )
        return Step(weight=None, pause=True)
    if entry.get("weight") is None:
        raise InvalidArgumentError(
            f"{field}.weight is required: the candidate's share in percent (or write pause: true)"
        )
    weight = entry["weight"]
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
        raise InvalidArgumentError(
            f"{field}.weight must be a whole percentage from 0 to 100, got {_shown(weight)}"
        )
    duration = entry.get("duration")
    duration_s = None if duration is None else parse_duration(duration, f"{field}.duration")
    return Step(weight=weight, duration_s=duration_s, shadow=shadow)


def _gate(value: object, source: str) -> GateSpec:
    if value is None:
        return GateSpec()
    field = f"{source}: gate"
    entry = _mapping(value, field, _GATE_KEYS)
    defaults = GateSpec()
    judge = entry.get("judge", defaults.judge)
    if judge not in ("local", "prometheus"):
        raise InvalidArgumentError(f"{field}.judge must be 'local' or 'prometheus', got {_shown(judge)}")
    url = entry.get("prometheus_url")
    if url is not None and not (isinstance(url, str) and re.fullmatch(r"https?://\S+", url)):
        raise InvalidArgumentError(
            f"{field}.prometheus_url must be an http:// or https:// URL, got {_shown(url)}"
        )
    if judge == "prometheus" and url is None:
        raise InvalidArgumentError(
            f"{field}.prometheus_url is required with judge: prometheus, for example http://prometheus:9090"
        )

    def number(name: str) -> Any:
        return entry.get(name, getattr(defaults, name))

    on_inconclusive = entry.get("on_inconclusive", defaults.on_inconclusive)
    if on_inconclusive not in ON_INCONCLUSIVE:
        raise InvalidArgumentError(
            f"{field}.on_inconclusive must be one of {', '.join(ON_INCONCLUSIVE)}, "
            f"got {_shown(on_inconclusive)}"
        )
    return GateSpec(
        judge=cast(Judge, judge),
        prometheus_url=url,
        min_requests=_count(number("min_requests"), f"{field}.min_requests"),
        failure_threshold=_count(number("failure_threshold"), f"{field}.failure_threshold"),
        compare=_outputs(entry.get("compare"), f"{field}.compare"),
        **{name: _rate(number(name), f"{field}.{name}", name) for name in _RATES},
        on_inconclusive=cast(OnInconclusive, on_inconclusive),
    )


def _mapping(value: object, field: str, known: tuple[str, ...]) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all ``known``; an unknown key is most likely a typo."""
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{field} must be a mapping of {', '.join(known)}; got {_shown(value)}")
    for key in value:
        if key not in known:
            name = key if isinstance(key, str) else _shown(key)
            raise InvalidArgumentError(f"{field}: unknown key {_shown(name)}{did_you_mean(name, known)}")
    return value


def _version(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"{field} must be a version number (a whole number from 1), got {_shown(value)}"
        )
    return value


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{field} must be true or false, got {_shown(value)}")
    return value


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{field} must be a whole number from 1, got {_shown(value)}")
    return value


def _rate(value: object, field: str, name: str) -> Any:
    if value is None and name in _RESOLVED_LATER:
        return None
    low, high = _RATES[name]
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and low <= number and (high is None or number <= high)):
        bounds = f"from {low:g} to {high:g}" if high is not None else f"from {low:g}"
        raise InvalidArgumentError(f"{field} must be a number {bounds}, got {_shown(value)}")
    return number


def _outputs(value: object, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(name, str) and name for name in value)
        or len(set(value)) != len(value)
    ):
        raise InvalidArgumentError(
            f"{field} must be a non-empty list of distinct output names (leave it out to compare all "
            f"outputs), got {_shown(value)}"
        )
    return tuple(value)
