"""What the router and the lifecycle ask of the releases, and what they report back to them.

The router asks which split applies to a model's unversioned requests and which version a copy of an
answer runs on; it reports each answer, and hands over both answers of each copied request to be
compared (it sees the releases only through :class:`conch.router.releases.RouterReleases`). The
lifecycle asks which versions a release holds loaded. :class:`ReleaseTraffic` answers from the
releases held, and :class:`~conch.release.controller.ReleaseController` adds how they change.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from conch.release.compare import Comparison, compare_outputs
from conch.release.gate import Role
from conch.release.model_release import ModelRelease
from conch.release.prometheus_judge import DRIFT_SCORE_BUCKETS
from conch.release.state import ReleaseState


class ReleaseTraffic:
    """The releases held, by model, as the request path and the lifecycle see them."""

    def __init__(self) -> None:
        self.releases: dict[str, ModelRelease] = {}

    def pinned(self, model: str) -> set[int]:
        """Both versions of an active release; after it, the version that serves (a rolled-back
        candidate is rejected, and unloads)."""
        held = self.releases.get(model)
        if held is None:
            return set()
        release = held.release
        if release.state.active:
            return {release.baseline, release.spec.candidate}
        if release.state in (ReleaseState.ROLLED_BACK, ReleaseState.FAILED):
            return {release.baseline}
        return {release.spec.candidate}

    def split(self, model: str) -> tuple[int, int, int] | None:
        """``(baseline, candidate, candidate's percent)`` for requests that name no version, or None
        when no release decides (Triton's rule: the newest READY version)."""
        held = self.releases.get(model)
        if held is None or held.release.state is ReleaseState.PROMOTED:
            return None  # promoted: the candidate is the newest, and Triton's rule serves it
        release = held.release
        return release.baseline, release.spec.candidate, release.weights()[release.spec.candidate]

    def shadow_version(self, model: str, answered: int) -> int | None:
        """The version a copy of this answer's request runs on, off the client's path, or None.

        In a shadow step every request is copied to the other version (while both answer clients, no
        version is sent more than :data:`~conch.release.copy_balance.COPY_SLACK` copies beyond what
        it sends); outside one, requests the candidate answered are copied to the baseline, so the
        canary steps have agreement figures too.
        """
        held = self.releases.get(model)
        if held is None or held.release.state is not ReleaseState.PROGRESSING:
            return None
        release = held.release
        other = release.spec.candidate if answered == release.baseline else release.baseline
        if answered not in (release.baseline, release.spec.candidate):
            return None
        if release.shadow and 0 < release.weights()[release.spec.candidate] < 100:
            # Both answer clients: each is sent as many copies as it sends (conch.release.copy_balance).
            return other if held.copies.allow(release.step, answered, other) else None
        if release.shadow or answered == release.spec.candidate:
            return other
        return None

    def compared_outputs(self, model: str) -> tuple[str, ...] | None:
        held = self.releases.get(model)
        return None if held is None else held.release.spec.gate.compare

    def role(self, model: str, version: int) -> Role | None:
        held = self.releases.get(model)
        if held is None:
            return None
        if version == held.release.baseline:
            return Role.BASELINE
        return Role.CANDIDATE if version == held.release.spec.candidate else None

    def record_answer(
        self,
        model: str,
        version: int,
        seconds: float,
        server_error: bool,
        copy: bool = False,
        execution: float | None = None,
    ) -> None:
        role = self.role(model, version)
        held = self.releases.get(model)
        if role is not None and held is not None and held.release.state is ReleaseState.PROGRESSING:
            held.figures.record_answer(role, seconds, server_error, copy, execution)
            held.answers[version] += 1
            held.server_errors[version] += server_error

    def record_comparison(self, model: str, comparison: Comparison) -> None:
        held = self.releases.get(model)
        if held is None:
            return
        held.compared += 1
        held.agreements += comparison.agreed
        if comparison.drift is not None:
            held.drift_buckets[bisect.bisect_left(DRIFT_SCORE_BUCKETS, comparison.drift)] += 1
            held.drift_sum += comparison.drift
        if held.release.state is ReleaseState.PROGRESSING:
            held.figures.record_comparison(comparison)

    def compare_copy(
        self,
        model: str,
        answered: int,
        answer: Mapping[str, np.ndarray],
        copy_answer: Mapping[str, np.ndarray],
        datatypes: Mapping[str, str],
        asked: Sequence[str],
    ) -> None:
        """Compare a request's answer by version ``answered`` with its copy's on the other version, on
        the outputs the gate's ``compare`` names (default: those the request asked for)."""
        role = self.role(model, answered)
        baseline, candidate = (answer, copy_answer) if role is Role.BASELINE else (copy_answer, answer)
        names = self.compared_outputs(model)
        wanted = [name for name in (names or asked) if name in asked]
        self.record_comparison(model, compare_outputs(baseline, candidate, datatypes, wanted))

    def record_dropped(self, model: str) -> None:
        held = self.releases.get(model)
        if held is not None:
            held.dropped += 1
