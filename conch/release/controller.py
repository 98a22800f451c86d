"""Drives every model's release: specs in, weights and shadow flags out, a gate judging each step.

The rules live beside it (:mod:`.spec`, :mod:`.state`, :mod:`.gate`, :mod:`.compare`); this is the thin
driver that feeds them. It never touches a request: the router asks it for weights and whether to
shadow, and reports each answer and each comparison back. Every few seconds :meth:`check` judges each
progressing release's current step from that step's own traffic, moves it on when its duration is over
with every limit kept, and applies ``on_failure`` after ``failure_threshold`` failed checks in a row.
Every transition is one structured log record and is saved to the state dir, so a restart resumes it.

What the request path asks and reports is :class:`~conch.release.traffic.ReleaseTraffic`. The
lifecycle asks :meth:`pinned` (both versions of a release under way, whatever the version policy says)
and :meth:`rejected` (the versions a rollback rejected, which never load) on each load. Rejections,
promotions, approvals and ends are verdicts (:mod:`.verdicts`): in force here at once, and handed to
``on_verdict`` for the shared store, which every replica reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from conch.core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from conch.models.served_models import ServedModels
from conch.observability.events import emit
from conch.release.gate import Judgement
from conch.release.model_release import (
    ModelRelease,
    end_inconclusive,
    judge_step,
    resolve_agreement,
    settle,
    status_of,
)
from conch.release.outcomes import (
    approval,
    approvals_missing,
    default_baseline,
    refusal_to_start,
    verdict_status,
    verdicts_of,
    waiting_for,
)
from conch.release.signed_actions import readmitted_version, signer
from conch.release.spec import ReleaseSpec, spec_from_dict, spec_to_json
from conch.release.state import ACTIONS, Release, ReleaseEvent, ReleaseState
from conch.release.store import ReleaseStore
from conch.release.traffic import ReleaseTraffic
from conch.release.verdicts import READMITTED, Rejection, Verdict, VerdictBook, release_digest
from conch.repository.version_policy import version_folders

log = logging.getLogger(__name__)


class ReleaseController(ReleaseTraffic):
    """The releases of one repository's models."""

    def __init__(
        self,
        repository: ServedModels,
        store: ReleaseStore | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.repository = repository
        self.store = store
        self.clock = clock
        #: Called with a model's name when the versions it must keep loaded changed.
        self.on_pinned_changed: Callable[[str], object] | None = None
        #: The verdicts every replica shares (rejections, promotions, approvals), and where new ones go.
        self.book = VerdictBook()
        self.on_verdict: Callable[[Verdict], object] | None = None
        #: Whether a version folder added after start is loaded (not with model control mode none).
        self.folders_appear = True
        #: Whether approvers are verified tokens (``--auth jwt``); without, identities are only named.
        self.identities_verified = False
        #: Digests of ended releases whose ``release.yaml`` was seen again (logged once, never started).
        self.ended_seen: set[str] = set()

    # -- what the lifecycle asks ------------------------------------------------------------------

    def rejected(self, model: str) -> dict[int, Rejection]:
        """The versions of ``model`` a rollback rejected; a 503 while the shared store was never read."""
        if self.book.unreadable:
            raise UnavailableError(self.book.unreadable)
        return self.book.of(model).rejected

    # -- control ------------------------------------------------------------------------------------

    def start(self, model: str, spec: ReleaseSpec, file_spec: dict[str, Any] | None = None) -> Release:
        """Declare a release of ``model``; refused while another one is under way.

        The versions are checked against the model's version folders, not what is loaded now: a
        release loads its baseline whatever the policy says (it may be declared before the server
        loads anything), and a candidate not there yet leaves the release pending.
        """
        folders = {folder.name: folder for folder in self.repository.model_folders()}
        if model not in folders:
            self.repository.model(model)  # the 404 in Triton's words
        available = version_folders(folders[model])
        # A release.yaml may come before its version (GitOps): it waits, saying why, where the API refuses.
        folders_appear = self.folders_appear or file_spec is not None
        refusal = refusal_to_start(model, spec, self.book.of(model), available, folders_appear)
        if refusal is not None:
            raise InvalidArgumentError(refusal)
        current = self.releases.get(model)
        if current is not None and current.release.state.active:
            raise InvalidArgumentError(
                f"release: model '{model}' already has a release of version "
                f"{current.release.spec.candidate} that is {current.release.state.value}; roll it back or "
                "promote it first"
            )
        served = self.repository.models.get(model)
        if spec.baseline is not None:
            loaded = served.versions.get(spec.baseline) if served else None
            if spec.baseline not in available or (loaded is not None and not loaded.ready):
                raise InvalidArgumentError(
                    f"release: baseline version {spec.baseline} of '{model}' is not READY (its version "
                    f"folders are {available}); name a version that loads"
                )
        candidate = served.versions.get(spec.candidate) if served else None
        if candidate is not None and not candidate.ready:
            raise InvalidArgumentError(
                f"release: candidate version {spec.candidate} of '{model}' is not READY: {candidate.reason}"
            )
        rejected = self.book.of(model).rejected
        serving = default_baseline(served, available, spec.candidate, self.book.of(model).promoted, rejected)
        release = Release.create(spec, self.clock(), serving=serving)
        held = self._hold(model, release, file_spec)
        if not self.identities_verified and any(step.approvals > 1 for step in spec.steps):
            unverified = "approvals come from identities nobody verifies: the server runs without --auth jwt"
            log.warning("release of '%s': %s", model, unverified)
            release.note(release.history[-1].at, "warning", unverified)
        if spec.readmit and spec.candidate in rejected:
            self._readmitted(model, spec.candidate, "release.yaml", f"readmit: true in release {held.digest}")
        self._changed(model, release.history[-1])
        self._pinned_changed(model)
        self.check_model(model)
        return release

    def rejected_elsewhere(self, model: str) -> None:
        """Roll back an active release whose candidate another replica (or person) rejected."""
        held = self.releases.get(model)
        if held is None or not held.release.state.active:
            return
        rejection = self.book.of(model).rejected.get(held.release.spec.candidate)
        if rejection is not None:
            self.act(model, "rollback", f"rejected elsewhere: {rejection.reason}", reject=False)

    def versions_loaded(self, model: str) -> None:
        """A load the release asked for is over: a pending release starts now if both versions are
        READY, rather than at the next periodic check (up to a second later)."""
        held = self.releases.get(model)
        if held is not None and held.release.state is ReleaseState.PENDING:
            self._start_when_ready(model, held, self.clock())

    def act(self, model: str, action: str, reason: str | None = None, reject: bool = True) -> Release:
        """``promote``, ``rollback``, ``pause`` or ``resume``, by hand unless ``reason`` says why.

        A rollback rejects the candidate everywhere, unless ``reject`` is False (the release was
        withdrawn, which judges nothing). A promote is refused while the step lacks approvals.
        """
        held = self._held(model)
        now = self.clock()
        if action not in ACTIONS:
            raise NotFoundError(f"no release action '{action}'; the actions are {list(ACTIONS)}")
        missing = approvals_missing(held.release, held.digest, self.book.of(model))
        if action == "promote" and missing is not None and held.release.state.active:
            raise InvalidArgumentError(f"cannot promote: {missing}")
        act = getattr(held.release, action)
        event = act(now) if reason is None else act(now, reason)
        if action in ("promote", "resume"):
            held.figures.reset(settling=True)
            held.tracker.reset()
            held.last_judgement = None  # the step is judged afresh, as when its duration moves it on
        if action == "rollback":
            held.rollbacks += 1
        self._changed(model, event, reject)
        self._pinned_changed(model)
        return held.release

    def approve(self, model: str, identity: str) -> Release:
        """``identity`` approves the current step; the approval that completes a pause step passes it."""
        held = self._held(model)
        release, now = held.release, self.clock()
        step = release.current_step
        if not release.state.active or step is None or release.step is None or not step.approvals:
            at = f"step {release.step}" if release.step is not None else "no step yet"
            raise InvalidArgumentError(
                f"cannot approve: the release of version {release.spec.candidate} is {release.state.value} "
                f"at {at}, which needs no approval"
            )
        if identity in self.book.of(model).approvers(held.digest, release.step):
            raise InvalidArgumentError(
                f"cannot approve: '{identity}' already approved step {release.step}; it needs "
                f"{step.approvals} approvals from distinct identities"
            )
        self._decided(approval(model, held.digest, release.step, identity, now))
        count = len(self.book.of(model).approvers(held.digest, release.step))
        self._changed(model, release.note(now, "approved", f"by {identity}: {count} of {step.approvals}"))
        if count >= step.approvals and release.state is ReleaseState.PAUSED and step.pause:
            return self.act(model, "promote", f"approved by {count} of {step.approvals}")
        return release

    def signed(self, model: str, action: str, body: dict[str, Any], subject: str) -> dict[str, Any]:
        """``approve`` or ``readmit`` (``{"version": N}``) by ``subject``, a token's ``sub``; without auth,
        by the body's ``identity``, which nobody verified. Answers the status."""
        identity = signer(body, subject)
        if action == "approve":
            self.approve(model, identity)
            return self.status(model)
        version = readmitted_version(body)
        self.readmit(model, version, identity)
        if model in self.releases:
            return self.status(model)
        return {"model": model, "readmitted": version, "identity": identity}

    def readmit(self, model: str, version: int, identity: str) -> None:
        """Let a rejected version serve again (``conch release readmit``); a 400 when it is not rejected."""
        self.repository.model(model)
        if version not in self.book.of(model).rejected:
            raise InvalidArgumentError(
                f"cannot readmit: version {version} of '{model}' is not rejected; the rejected versions are "
                f"{sorted(self.book.of(model).rejected) or 'none'}"
            )
        self._readmitted(model, version, identity, "re-admitted by hand")
        self._pinned_changed(model)

    def status(self, model: str) -> dict[str, Any]:
        """``GET /v2/models/{m}/release``: state, step, weights, each gate figure with its limit, history,
        and the model's verdicts (rejected versions and why, the last promoted one, approvals)."""
        held = self._held(model)
        status = status_of(model, held, self.clock())
        status.update(verdict_status(held, self.book.of(model), self.book.unshared))
        if held.release.state is ReleaseState.PENDING:
            available = version_folders(self.repository.root / model)
            served = self.repository.models.get(model)
            status["waiting_for"] = waiting_for(served, held.release, available, self.folders_appear)
        return status

    def adopt(self, model: str, release: Release, file_spec: dict[str, Any] | None) -> None:
        """Take over a release saved before a restart, as it was (:mod:`.declarations` reads it)."""
        self._hold(model, release, file_spec)
        emit(log, "release_resumed", model=model, state=release.state.value, step=release.step)

    # -- the gate -----------------------------------------------------------------------------------

    def check(self) -> None:
        """One round: every model's release judged and moved on where due."""
        for model in list(self.releases):
            self.check_model(model)

    async def check_off_loop(self) -> None:
        """One round, with Prometheus's queries on a worker thread: a slow Prometheus never holds the
        event loop (and the requests on it); the decisions are then taken on the loop, as in :meth:`check`."""
        for model in list(self.releases):
            held = self.releases.get(model)
            remote = held is not None and held.release.spec.gate.judge == "prometheus"
            if held is not None and remote and held.release.state is ReleaseState.PROGRESSING:
                judged = await asyncio.to_thread(judge_step, model, held, self.clock())
                self.check_model(model, judged, prejudged=True)
            else:
                self.check_model(model)

    def check_model(self, model: str, judged: Judgement | None = None, prejudged: bool = False) -> None:
        """Judge ``model``'s release (or, ``prejudged``, take ``judged``, reached off the loop: None when
        Prometheus could not answer) and move it on if due."""
        held = self.releases[model]
        release = held.release
        now = self.clock()
        resolve_agreement(held, self.repository.root / model)
        if release.state is ReleaseState.PENDING:
            self._start_when_ready(model, held, now)
            return
        if release.state is not ReleaseState.PROGRESSING:
            return
        settle(held, now)
        judgement = judged if prejudged else judge_step(model, held, self.clock())
        if judgement is None:
            return
        held.last_judgement = judgement
        if held.tracker.observe(judgement):
            event = release.on_gate_failure(now, judgement.reason)
            if release.state is ReleaseState.ROLLED_BACK:
                held.rollbacks += 1
            self._changed(model, event)
            self._pinned_changed(model)
            return
        if (
            _may_advance(judgement, release)
            and approvals_missing(release, held.digest, self.book.of(model)) is None
        ):
            moved = release.advance_if_due(now)
            if moved is not None:
                held.figures.reset(settling=True)
                held.tracker.reset()
                held.last_judgement = None
                self._changed(model, moved)
                if release.state is ReleaseState.PROMOTED:
                    self._pinned_changed(model)
        elif (ended := end_inconclusive(release, judgement, now)) is not None:
            held.rollbacks += release.state is ReleaseState.ROLLED_BACK
            self._changed(model, ended)
            self._pinned_changed(model)

    def _start_when_ready(self, model: str, held: ModelRelease, now: float) -> None:
        """``pending`` -> the first step once both versions are READY.

        The baseline may be loading just for the release (the version policy had unloaded it): had
        the split started on the candidate alone, keys meant for the baseline would land on the
        candidate until it loaded, and a route key would change version within a step.
        """
        served = self.repository.models.get(model)
        release = held.release
        needed = [
            served.versions.get(number) if served else None
            for number in (release.baseline, release.spec.candidate)
        ]
        failed = [v for v in needed if v is not None and not v.ready and v.reason]
        if failed:
            reason = f"version {failed[0].version} failed to load: {failed[0].reason}"
            self._changed(model, release.fail(now, reason))
            self._pinned_changed(model)
        elif all(version is not None and version.ready for version in needed):
            self._changed(model, release.versions_ready(now))

    # -- plumbing -----------------------------------------------------------------------------------

    def _held(self, model: str) -> ModelRelease:
        self.repository.model(model)
        held = self.releases.get(model)
        if held is None:
            raise NotFoundError(
                f"model '{model}' has no release; start one with POST /v2/models/{model}/release"
            )
        return held

    def _hold(self, model: str, release: Release, file_spec: dict[str, Any] | None) -> ModelRelease:
        held = ModelRelease.of(release, self.clock)
        held.file_spec = file_spec
        held.digest = release_digest(model, spec_to_json(release.spec))
        self.releases[model] = held
        return held

    def _readmitted(self, model: str, version: int, identity: str, reason: str) -> None:
        self._decided(
            Verdict(READMITTED, model, self.clock(), version=version, reason=reason, identity=identity)
        )
        emit(log, "version_readmitted", model=model, version=version, identity=identity, reason=reason)

    def _decided(self, verdict: Verdict) -> None:
        """A verdict taken here: in force at once, and handed on to be written to the shared store."""
        self.book.add(verdict)
        if self.on_verdict is not None:
            self.on_verdict(verdict)

    def _changed(self, model: str, event: ReleaseEvent, reject: bool = True) -> None:
        held = self.releases[model]
        for verdict in verdicts_of(model, held.release, held.digest, event, reject):
            self._decided(verdict)
        emit(
            log,
            "release_" + event.event,
            model=model,
            state=event.state.value,
            step=event.step,
            reason=event.reason,
        )
        if self.store is not None:
            self.store.save(model, self.releases[model].release, self.clock())

    def _pinned_changed(self, model: str) -> None:
        if self.on_pinned_changed is not None:
            self.on_pinned_changed(model)


def _may_advance(judgement: Judgement, release: Release) -> bool:
    """A step ends only when its judgement is settled (or, with ``on_inconclusive: advance``, not
    failed); a step at weight 100 has no baseline traffic to judge against (the steps before it were
    judged), so its duration alone ends it."""
    step = release.current_step
    everything = step is not None and step.weight == 100
    anyway = release.spec.gate.on_inconclusive == "advance" and not judgement.failed
    return everything or judgement.settled or anyway


def spec_from_body(body: object) -> ReleaseSpec:
    """``POST /v2/models/{m}/release``'s JSON body, checked as ``release.yaml`` is."""
    return spec_from_dict(body, "release")
