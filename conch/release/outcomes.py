"""What a release's decisions mean for its versions: which verdicts an event leaves, and who may go on.

Pure rules over plain data, for :mod:`.controller` to apply:

- :func:`verdicts_of` turns a release event into the verdicts every replica must learn: a rollback
  rejects the candidate (unless the release was withdrawn by removing its file, which judges nothing),
  a promotion records the version that now serves, and every end records the release's digest so that
  no pod starts it again.
- :func:`refusal_to_start` says why a release may not start: a candidate that a rollback rejected,
  without ``readmit``; a candidate with no folder on a server that never loads a folder added later.
- :func:`approvals_missing` says what a step still waits for before it may end.
- :func:`default_baseline` picks the baseline of a release that names none, never a rejected version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conch.models.model import Model
from conch.release.model_release import ModelRelease
from conch.release.spec import ReleaseSpec
from conch.release.state import Release, ReleaseEvent, ReleaseState
from conch.release.verdicts import (
    APPROVED,
    ENDED,
    PROMOTED,
    REJECTED,
    ModelVerdicts,
    Verdict,
    readmit_hint,
)


def verdicts_of(
    model: str, release: Release, digest: str, event: ReleaseEvent, reject: bool
) -> list[Verdict]:
    """The verdicts ``event`` leaves; ``reject=False`` for a rollback that judged nothing."""
    candidate, at = release.spec.candidate, event.at
    if event.state is ReleaseState.PROMOTED:
        return [
            Verdict(PROMOTED, model, at, version=candidate, reason=event.reason, release=digest),
            Verdict(ENDED, model, at, version=candidate, reason="promoted", release=digest),
        ]
    if event.state is ReleaseState.ROLLED_BACK:
        ended = Verdict(ENDED, model, at, version=candidate, reason="rolled back", release=digest)
        if not reject:
            return [ended]
        why = f"rolled back by release {digest}: {event.reason}"
        return [Verdict(REJECTED, model, at, version=candidate, reason=why, release=digest), ended]
    if event.state is ReleaseState.FAILED:
        return [Verdict(ENDED, model, at, version=candidate, reason="failed", release=digest)]
    return []


def approval(model: str, digest: str, step: int, identity: str, at: float) -> Verdict:
    """One identity's approval of one step of one release."""
    return Verdict(APPROVED, model, at, release=digest, step=step, identity=identity)


def refusal_to_start(
    model: str, spec: ReleaseSpec, verdicts: ModelVerdicts, available: list[int], folders_appear: bool
) -> str | None:
    """Why the release may not start, or None. ``folders_appear``: the server loads folders added later."""
    rejection = verdicts.rejected.get(spec.candidate)
    if rejection is not None and not spec.readmit:
        return (
            f"release: candidate version {spec.candidate} of '{model}' was rejected ({rejection.reason}); "
            f"re-admit it first with {readmit_hint(model, spec.candidate)}"
        )
    if spec.candidate not in available and not folders_appear:
        return (
            f"release: candidate version {spec.candidate} of '{model}' has no folder, and with "
            "--model-control-mode none a version folder added later is never loaded; add the folder "
            "before declaring the release, or serve with --model-control-mode poll"
        )
    return None


def approvals_missing(release: Release, digest: str, verdicts: ModelVerdicts) -> str | None:
    """What the current step still waits for before it may end, or None when it has every approval."""
    step = release.current_step
    if step is None or release.step is None or not step.approvals:
        return None
    who = verdicts.approvers(digest, release.step)
    if len(who) >= step.approvals:
        return None
    have = f"{len(who)} ({', '.join(who)})" if who else "none"
    return (
        f"step {release.step} needs {step.approvals} approvals from distinct identities and has {have}; "
        "approve it with `conch release approve`"
    )


def default_baseline(
    served: Model | None,
    available: list[int],
    candidate: int,
    promoted: int | None,
    rejected: Mapping[int, object],
) -> int | None:
    """The default baseline, never a rejected version: the newest READY version that is not the
    candidate, else the last promoted one, else the newest version folder below the candidate (at
    start, before anything is loaded)."""
    ready = [v.version for v in served.ready_versions if v.version != candidate] if served else []
    ready = [number for number in ready if number not in rejected]
    if ready:
        return ready[-1]
    if promoted is not None and promoted != candidate and promoted in available and promoted not in rejected:
        return promoted
    older = [number for number in available if number < candidate and number not in rejected]
    return older[-1] if older else None


def verdict_status(held: ModelRelease, verdicts: ModelVerdicts, unshared: list[str]) -> dict[str, Any]:
    """The status document's verdict keys: rejected versions, the last promoted one, the current
    step's approvals, and verdicts the shared store refused (in force on this replica only)."""
    release = held.release
    step = release.current_step
    approvals = None
    if step is not None and release.step is not None and step.approvals:
        who = verdicts.approvers(held.digest, release.step)
        approvals = {"needed": step.approvals, "have": len(who), "by": who}
    rejected = [
        {"version": r.version, "reason": r.reason, "time": r.at, "fingerprint": r.fingerprint}
        for r in sorted(verdicts.rejected.values(), key=lambda r: r.version)
    ]
    return {
        "release_id": held.digest,
        "rejected": rejected,
        "last_promoted": verdicts.promoted,
        "approvals": approvals,
        "unshared_verdicts": list(unshared),
    }


def waiting_for(
    served: Model | None, release: Release, available: list[int], folders_appear: bool
) -> list[str]:
    """Why a pending release has not started: each of its versions that is not READY, and why."""
    waiting = []
    for number in (release.baseline, release.spec.candidate):
        version = served.versions.get(number) if served is not None else None
        if version is None and number not in available and not folders_appear:
            waiting.append(
                f"version {number} is not loaded: with --model-control-mode none a version folder added "
                "after start is never loaded; ship it with the repository (a new image), or serve with "
                "--model-control-mode poll"
            )
        elif version is None:
            waiting.append(f"version {number} is not loaded yet (its folder is missing or still loading)")
        elif not version.ready:
            waiting.append(f"version {number} is {version.state.value}: {version.reason or 'loading'}")
    return waiting
