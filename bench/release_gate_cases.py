"""``python -m bench.release_gate_cases``: the release gate with its default settings, on four candidates,
20 simulated releases each, and how often each went the right way.

Why: the gate must tell noise from change with no edits to its limits. The four cases:

- ``identical``: the same model again. Must be promoted every time.
- ``benign_retrain``: a retrain whose predictions differ on 0.5% of rows, by a little (drift 0.01 to
  0.2). Must be promoted.
- ``shuffled_labels``: trained on shuffled labels: 62% agreement (the issue's v5), drifting far when it
  disagrees. Must be rolled back in its first step (the 10% canary) before 100 of its answers reach
  clients.
- ``doubled_compute``: the same predictions, twice the compute time per execution. Must be rolled back.

**A simulation, driving the real code.** Each release runs through the real
:class:`~conch.release.controller.ReleaseController` (its decision path, the sequential gate, the
state machine) on a fake clock; only the traffic is simulated: 300 requests a second split by the
step's weight, the candidate's answers copied to the baseline in canary steps and every request copied
in the shadow step, as the router does, and each answer's latency and comparison reported to the
controller as the router and the shadow runner report them. The release checks once a second, as the
server does. Latencies model a loaded 2-core machine: per request ``(overhead + compute) * load * jitter``
with 0.35 ms of serving overhead, 0.25 ms of compute (a scikit-learn pipeline's), a load factor per
second drawn log-normally (sigma 0.25: P95 moves by tens of percent from second to second, as the
issue measured), log-normal jitter per request (sigma 0.35), 2% of requests delayed 3 to 10 times
(scheduler stalls), and shadow copies 20% slower (they queue behind live requests).

The release (the user's choice of steps, not the gate's): 10% for 2m, 50% with shadow for 1m, 100%.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from conch.release.compare import Comparison
from conch.release.controller import ReleaseController
from conch.release.spec import spec_from_dict
from tests.fixtures.release_fakes import Clock, FakeRepository

MODEL = "wine"
RATE_PER_S = 300
STEPS = [
    {"weight": 10, "duration": "2m"},
    {"weight": 50, "duration": "1m", "shadow": True},
    {"weight": 100},
]
OVERHEAD_S, COMPUTE_S = 0.35e-3, 0.25e-3
LOAD_SIGMA, JITTER_SIGMA, STALL_SHARE, COPY_SLOWDOWN = 0.25, 0.35, 0.02, 1.2
#: An execution's own spread (the served bench's identical versions: P95s within +-10% of each other).
EXECUTION_SIGMA = 0.1
#: The longest a release may run before the bench calls it undecided (simulated seconds).
MAX_S = 400


@dataclass(frozen=True)
class Case:
    """A candidate: how often it agrees with the baseline, how far it drifts then, its compute time."""

    name: str
    agreement: float
    drift_when_disagreeing: tuple[float, float]
    compute_factor: float
    expected: str


CASES = (
    Case("identical", 1.0, (0.0, 0.0), 1.0, "promoted"),
    Case("benign_retrain", 0.995, (0.01, 0.2), 1.0, "promoted"),
    Case("shuffled_labels", 0.62, (0.4, 1.5), 1.0, "rolled_back"),
    Case("doubled_compute", 1.0, (0.0, 0.0), 2.0, "rolled_back"),
)


@dataclass
class Outcome:
    case: str
    state: str
    decided_s: float
    step: int | None
    candidate_answers: int
    client_answers: int
    reason: str
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def candidate_share(self) -> float:
        return self.candidate_answers / self.client_answers if self.client_answers else 0.0


def run_release(case: Case, seed: int, root: Path) -> Outcome:
    """One release of ``case``'s candidate against the baseline, to its end (or :data:`MAX_S`)."""
    rng = np.random.default_rng(seed)
    clock = Clock()
    controller = ReleaseController(FakeRepository(root, MODEL), None, clock=clock)  # type: ignore[arg-type]
    controller.start(MODEL, spec_from_dict({"candidate": 2, "baseline": 1, "steps": STEPS}))
    held = controller.releases[MODEL]
    started = clock.now
    decisive = None
    answers = {1: 0, 2: 0}
    # A paused release waits for a person: that is the gate's decision, as a rollback or a promotion is.
    while held.release.state.value in ("pending", "progressing") and clock.now - started < MAX_S:
        weight = held.release.weights()[2] / 100
        shadow = held.release.shadow
        load = math.exp(rng.normal(0, LOAD_SIGMA))
        count = rng.poisson(RATE_PER_S)
        for offset in np.sort(rng.random(count)):
            version = 2 if rng.random() < weight else 1
            answers[version] += 1
            latency, execution = _timing(rng, case, version, load)
            controller.record_answer(MODEL, version, latency, False, execution=execution)
            if version == 2 or shadow:  # the router's copy to the other version
                other = 1 if version == 2 else 2
                latency, execution = _timing(rng, case, other, load)
                controller.record_answer(MODEL, other, latency * COPY_SLOWDOWN, False, execution=execution)
                controller.record_comparison(MODEL, _comparison(rng, case))
            del offset
        clock.now += 1.0
        before = (held.release.step, held.last_judgement)
        controller.check()
        step = held.release.current_step
        if before[0] != held.release.step and step is not None and step.weight == 100:
            decisive = before[1]  # the last judged step's judgement when it let the candidate through
    release = held.release
    last = release.history[-1]
    judgement = held.last_judgement or held.tracker.last_failure
    if release.state.value == "promoted":
        judgement = decisive
    return Outcome(
        case.name,
        release.state.value,
        clock.now - started,
        release.step,
        answers[2],
        answers[1] + answers[2],
        last.reason,
        [
            {
                "name": c.name,
                "value": c.value,
                "lower": c.lower,
                "upper": c.upper,
                "limit": c.limit,
                "outcome": str(c.outcome),
                "noise": c.noise,
            }
            for c in (judgement.checks if judgement else ())
        ],
    )


def _timing(rng: np.random.Generator, case: Case, version: int, load: float) -> tuple[float, float]:
    """(latency, execution) of one answer: the execution is the compute under the moment's load,
    the latency that plus the frontends' overhead, jitter and now and then a stall."""
    compute = COMPUTE_S * (case.compute_factor if version == 2 else 1.0)
    execution = compute * load * math.exp(rng.normal(0, EXECUTION_SIGMA))
    seconds = (OVERHEAD_S + compute) * load * math.exp(rng.normal(0, JITTER_SIGMA))
    if rng.random() < STALL_SHARE:
        seconds *= rng.uniform(3, 10)
    return float(seconds), float(execution)


def _comparison(rng: np.random.Generator, case: Case) -> Comparison:
    if rng.random() < case.agreement:
        return Comparison(agreed=True, drift=float(rng.uniform(0, 0.002)))
    low, high = case.drift_when_disagreeing
    return Comparison(agreed=False, drift=float(rng.uniform(low, high)), disagreeing=("label",))


def _check_line(check: dict[str, Any]) -> str:
    value = "no data" if check["value"] is None else f"{check['value']:.4g}"
    if check["lower"] is not None and check["upper"] is not None:
        value += f" [{check['lower']:.4g}, {check['upper']:.4g}]"
    return f"{check['name']} {value} (limit {check['limit']:g}): {check['outcome']}"


def right_way(case: Case, outcome: Outcome) -> bool:
    """Whether the release ended as it should; a shuffled-label candidate must also be rolled back in
    step 1 with fewer than 100 answers to clients."""
    if outcome.state != case.expected:
        return False
    if case.name == "shuffled_labels":
        return outcome.step == 1 and outcome.candidate_answers < 100
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="releases per case (default 20)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="where the JSON goes")
    parser.add_argument(
        "--cases", nargs="+", choices=[case.name for case in CASES], help="the cases to run (default: all)"
    )
    args = parser.parse_args(argv)
    import tempfile

    results: dict[str, Any] = {"runs": args.runs, "cases": {}}
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in (c for c in CASES if args.cases is None or c.name in args.cases):
            outcomes = [run_release(case, seed, Path(scratch)) for seed in range(args.runs)]
            good = sum(right_way(case, o) for o in outcomes)
            states = {s: sum(o.state == s for o in outcomes) for s in sorted({o.state for o in outcomes})}
            decided = [o.decided_s for o in outcomes]
            answered = [o.candidate_answers for o in outcomes]
            lines.append(
                f"{case.name}: right way {good}/{len(outcomes)}, states {states}; decision at "
                f"{np.median(decided):.0f} s median (worst {max(decided):.0f} s), candidate answers to "
                f"clients by then {np.median(answered):.0f} median (worst {max(answered)})"
            )
            first = outcomes[0]
            lines.append(
                f"  run 0: {first.state} at {first.decided_s:.0f} s, step {first.step}, candidate "
                f"{first.candidate_answers} of {first.client_answers} client answers "
                f"({first.candidate_share:.1%}); {first.reason}"
            )
            lines.extend(f"    {_check_line(check)}" for check in first.checks)
            print("\n".join(lines[-2 - len(first.checks) :]))
            results["cases"][case.name] = {
                "right_way": good,
                "states": states,
                "decided_s": decided,
                "candidate_answers": answered,
                "run0": first.__dict__ | {"candidate_share": first.candidate_share},
            }
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stamp}-release-gate-cases.json").write_text(json.dumps(results, indent=1) + "\n")
    summary = [f"# bench.release_gate_cases, {args.runs} simulated releases a case ({stamp} UTC)", "", "```"]
    (args.out / f"{stamp}-release-gate-cases.md").write_text("\n".join([*summary, *lines, "```", ""]))
    return 0 if all(c["right_way"] == args.runs for c in results["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
