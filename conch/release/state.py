"""A release's state machine: which step it is at, the weights that follow from it, and what happened.

The rules only. There is no clock, no timer, no logging and no I/O: every method takes ``now``, in
seconds of the wall clock (``time.time()`` in the driver), because the events are shown to people and
kept across restarts, which a monotonic clock's readings are not. Each change appends a
:class:`ReleaseEvent` to :attr:`Release.history` and returns it, for the driver to log, count and save.
The driver decides when to call what: :meth:`Release.versions_ready` once both versions are READY,
:meth:`Release.on_gate_failure` when the gate's failed checks reach ``failure_threshold``, and
:meth:`Release.advance_if_due` on each check the gate passes.

The states:

- ``pending``: declared, the candidate (or a baseline loaded for the release) is not READY yet; the
  version serving unversioned traffic before goes on serving it.
- ``progressing``: at a step, with its weight; the step ends when its duration is over.
- ``paused``: traffic stays as it was at the step, unjudged. A pause step waits for ``promote``; a pause
  by hand or by ``on_failure: pause`` waits for ``resume`` (the step again, its clock started afresh,
  so it is judged on traffic after the decision) or ``promote`` (the step approved as it stands).
- ``promoted``: the last step is done; the candidate serves everything.
- ``rolled_back``: the gate or a person stopped it; the baseline serves everything.
- ``failed``: the release could not run, for example the candidate failed to load.

Steps are numbered from 1 in :attr:`Release.step`, the JSON and the messages, as people count them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from conch.core.errors import InvalidArgumentError
from conch.release.spec import ReleaseSpec, Step, format_duration, spec_from_dict, spec_to_json

STATE_FORMAT = 1  # the version of to_json's layout, for the day it changes
#: The :class:`Release` methods a person calls by name (``POST /v2/models/{m}/release/{action}``).
ACTIONS = ("promote", "rollback", "pause", "resume")


class ReleaseState(enum.StrEnum):
    """A release's state; the value is its name in the JSON, the logs and the metrics' labels."""

    PENDING = "pending"
    PROGRESSING = "progressing"
    PAUSED = "paused"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """Whether the release is under way: it holds both versions and refuses a second release."""
        return self in (ReleaseState.PENDING, ReleaseState.PROGRESSING, ReleaseState.PAUSED)


@dataclass(frozen=True)
class ReleaseEvent:
    """One transition: when, what (``started``, ``advanced``, ``paused``...), why, and where it left off."""

    at: float
    event: str
    reason: str
    state: ReleaseState
    step: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.at,
            "event": self.event,
            "reason": self.reason,
            "state": self.state.value,
            "step": self.step,
        }

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> ReleaseEvent:
        """The event :meth:`to_json` wrote; KeyError, TypeError or ValueError when it is not one."""
        step = item["step"]
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise ValueError(f"event step {step!r} is not a step number")
        return cls(
            float(item["time"]), str(item["event"]), str(item["reason"]), ReleaseState(item["state"]), step
        )


class Release:
    """One model's release, changed only through its methods; build one with :meth:`create`."""

    def __init__(
        self,
        spec: ReleaseSpec,
        baseline: int,
        state: ReleaseState,
        step: int | None,
        step_started_at: float | None,
        history: list[ReleaseEvent],
    ) -> None:
        self.spec = spec
        self.baseline = baseline
        self.state = state
        self.step = step  # 1-based; None before the first step
        self.step_started_at = step_started_at  # the gate judges only the traffic since then
        self.history = history

    @classmethod
    def create(cls, spec: ReleaseSpec, now: float, *, serving: int | None = None) -> Release:
        """A ``pending`` release; ``serving`` is the version serving unversioned traffic now.

        It is the baseline when the spec names none.
        """
        baseline = spec.baseline if spec.baseline is not None else serving
        if baseline is None:
            raise InvalidArgumentError(
                "release: no baseline is named and no version serves unversioned traffic to default it "
                "from; set 'baseline'"
            )
        if baseline == spec.candidate:
            raise InvalidArgumentError(
                f"release: the baseline defaults to version {baseline}, the one serving now, which is the "
                "candidate; set 'baseline' to the version the release moves traffic from"
            )
        release = cls(spec, baseline, ReleaseState.PENDING, None, None, [])
        release._record(now, "created", f"waiting for versions {baseline} and {spec.candidate} to be READY")
        return release

    @property
    def current_step(self) -> Step | None:
        """The step the release is at, ``None`` before the first."""
        return None if self.step is None else self.spec.steps[self.step - 1]

    @property
    def shadow(self) -> bool:
        """Whether each request also runs, off the client's path, on the version that did not answer it."""
        traffic = self._traffic_step()
        return self.state.active and traffic is not None and traffic.shadow

    def weights(self) -> dict[int, int]:
        """Percent of the requests that name no version, per version: ``{baseline: 95, candidate: 5}``."""
        if self.state is ReleaseState.PROMOTED:
            weight = 100
        elif self.state in (ReleaseState.PROGRESSING, ReleaseState.PAUSED):
            traffic = self._traffic_step()
            weight = 0 if traffic is None or traffic.weight is None else traffic.weight
        else:
            weight = 0
        return {self.baseline: 100 - weight, self.spec.candidate: weight}

    def step_elapsed_s(self, now: float) -> float:
        """Seconds the current step has run, 0 before the first."""
        return 0.0 if self.step_started_at is None else max(0.0, now - self.step_started_at)

    def versions_ready(self, now: float) -> ReleaseEvent:
        """The baseline and the candidate are READY: ``pending`` -> the first step."""
        if self.state is not ReleaseState.PENDING:
            raise self._refuse("versions_ready", "only a pending release waits for its versions")
        ready = f"versions {self.baseline} and {self.spec.candidate} are READY"
        return self._enter(1, now, "started", ready)

    def advance_if_due(self, now: float) -> ReleaseEvent | None:
        """The next step (or ``promoted``) when the current step's duration is over; else ``None``."""
        step = self.current_step
        if self.state is not ReleaseState.PROGRESSING or step is None:
            return None
        if step.duration_s is not None and self.step_elapsed_s(now) < step.duration_s:
            return None
        done = f"step {self.step} done"
        if step.duration_s is not None:
            done += f" after {format_duration(step.duration_s)}"
        return self._next(now, done)

    def promote(self, now: float, reason: str = "promoted by hand") -> ReleaseEvent:
        """Approve the current step: the next step now, or ``promoted`` after the last one."""
        if self.state not in (ReleaseState.PROGRESSING, ReleaseState.PAUSED):
            raise self._refuse("promote", "nothing to promote")
        return self._next(now, reason)

    def rollback(self, now: float, reason: str = "rolled back by hand") -> ReleaseEvent:
        """Stop the release: the candidate's weight goes to 0 at once (the controller rejects it)."""
        if not self.state.active:
            raise self._refuse("rollback", "nothing to roll back")
        self.state = ReleaseState.ROLLED_BACK
        return self._record(now, "rolled_back", reason)

    def pause(self, now: float, reason: str = "paused by hand") -> ReleaseEvent:
        """Hold the step's traffic as it is, unjudged, until ``resume`` or ``promote``."""
        if self.state is not ReleaseState.PROGRESSING:
            raise self._refuse("pause", "only a progressing release can be paused")
        self.state = ReleaseState.PAUSED
        return self._record(now, "paused", reason)

    def resume(self, now: float, reason: str = "resumed by hand") -> ReleaseEvent:
        """Run the paused step again, judged from now on; a pause step takes ``promote`` instead."""
        step = self.current_step
        if self.state is not ReleaseState.PAUSED or step is None:
            raise self._refuse("resume", "only a paused release can be resumed")
        if step.pause:
            raise self._refuse("resume", f"step {self.step} is a pause step: it waits for 'promote'")
        self.state = ReleaseState.PROGRESSING
        self.step_started_at = now
        return self._record(now, "resumed", reason)

    def fail(self, now: float, reason: str) -> ReleaseEvent:
        """The release cannot run (the candidate, or a baseline it had to load, failed to load): the
        baseline's weight goes back to 100; while it is not READY, the router answers from the other."""
        if not self.state.active:
            raise self._refuse("fail", "it has already ended")
        self.state = ReleaseState.FAILED
        return self._record(now, "failed", reason)

    def on_gate_failure(self, now: float, reason: str) -> ReleaseEvent:
        """The gate's failed checks reached ``failure_threshold``: apply ``on_failure``."""
        if self.state is not ReleaseState.PROGRESSING:
            raise self._refuse("on_gate_failure", "the gate judges only a progressing release")
        if self.spec.on_failure == "pause":
            return self.pause(now, f"gate: {reason}")
        return self.rollback(now, f"gate: {reason}")

    def note(self, now: float, event: str, reason: str) -> ReleaseEvent:
        """An event that changes no state (an approval, a re-admission), kept in the history."""
        return self._record(now, event, reason)

    def to_json(self, now: float) -> dict[str, Any]:
        """The release as saved in the state dir; ``GET .../release`` answers this with the figures.

        The step's start is kept as the time it has run (``step_elapsed_s``), not as a clock reading:
        after a restart the step goes on for what it had left. Time the server was down does not count,
        because no traffic was judged then.
        """
        return {
            "format": STATE_FORMAT,
            "spec": spec_to_json(self.spec),
            "baseline": self.baseline,
            "state": self.state.value,
            "step": self.step,
            "step_elapsed_s": None if self.step is None else self.step_elapsed_s(now),
            "history": [event.to_json() for event in self.history],
        }

    @classmethod
    def from_json(cls, data: object, now: float, source: str = "release state") -> Release:
        """The release :meth:`to_json` saved, its step resumed at ``now`` where it had got to."""
        try:
            if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
                raise ValueError(f"not a release state of format {STATE_FORMAT}")
            spec = spec_from_dict(data["spec"], f"{source}: spec")
            state = ReleaseState(data["state"])
            step, elapsed = data["step"], data["step_elapsed_s"]
            _check_step(state, step, elapsed, len(spec.steps))
            baseline = data["baseline"]
            if isinstance(baseline, bool) or not isinstance(baseline, int) or baseline < 1:
                raise ValueError(f"baseline {baseline!r} is not a version number")
            if baseline == spec.candidate:
                raise ValueError(f"baseline {baseline} is the candidate")
            history = [ReleaseEvent.from_json(item) for item in data["history"]]
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgumentError(f"{source}: cannot be read back: {error}") from None
        started = None if elapsed is None else now - float(elapsed)
        return cls(spec, baseline, state, step, started, history)

    def _traffic_step(self) -> Step | None:
        """The step whose weight and shadow apply now: a pause step keeps the previous one's."""
        if self.step is None:
            return None
        for step in reversed(self.spec.steps[: self.step]):
            if not step.pause:
                return step
        return None

    def _next(self, now: float, reason: str) -> ReleaseEvent:
        assert self.step is not None  # progressing and paused releases are at a step
        if self.step == len(self.spec.steps):
            self.state = ReleaseState.PROMOTED
            return self._record(now, "promoted", f"{reason}; version {self.spec.candidate} serves 100%")
        return self._enter(self.step + 1, now, "advanced", reason)

    def _enter(self, number: int, now: float, event: str, reason: str) -> ReleaseEvent:
        step = self.spec.steps[number - 1]
        self.step, self.step_started_at = number, now
        of = f"step {number} of {len(self.spec.steps)}"
        if step.pause:
            self.state = ReleaseState.PAUSED
            return self._record(now, event, f"{reason}; {of} is a pause step: waiting for promote")
        self.state = ReleaseState.PROGRESSING
        what = f"weight {step.weight}" + (", shadow" if step.shadow else "")
        if step.duration_s is not None:
            what += f" for {format_duration(step.duration_s)}"
        return self._record(now, event, f"{reason}; {of}: {what}")

    def _record(self, now: float, event: str, reason: str) -> ReleaseEvent:
        entry = ReleaseEvent(now, event, reason, self.state, self.step)
        self.history.append(entry)
        return entry

    def _refuse(self, action: str, why: str) -> InvalidArgumentError:
        at = f" at step {self.step}" if self.step is not None else ""
        return InvalidArgumentError(
            f"cannot {action}: the release of version {self.spec.candidate} is {self.state.value}{at}; {why}"
        )


def _check_step(state: ReleaseState, step: object, elapsed: object, steps: int) -> None:
    """Refuse a saved step that the state machine could not have left (a hand-edited or torn file)."""
    if step is None:
        if elapsed is not None or state in (ReleaseState.PROGRESSING, ReleaseState.PAUSED):
            raise ValueError(f"a {state.value} release without a step")
        return
    if state is ReleaseState.PENDING:
        raise ValueError("a pending release at a step")
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= steps:
        raise ValueError(f"step {step!r} is not one of the spec's {steps} steps")
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not 0 <= elapsed < math.inf:
        raise ValueError(f"step_elapsed_s {elapsed!r} is not a number of seconds")
