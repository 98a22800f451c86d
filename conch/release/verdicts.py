"""What every replica must agree on about a model's versions: rejected, promoted, re-admitted, approved.

Plain data and pure rules: no clock, no I/O. Each decision is one immutable :class:`Verdict` record,
written once to the shared store (:mod:`.verdict_store`) and never changed, so replicas that write at
the same time never overwrite each other. :class:`ModelVerdicts` folds a model's records, oldest first,
into what they add up to:

- ``rejected``: versions a rollback rejected, keyed by version number with the content fingerprint they
  were rejected with. A later re-admission of the same version lifts it; a later rejection sets it again.
- ``promoted``: the last version a release promoted (the default baseline of the next release).
- ``ended``: the digests of releases that ended, so a pod that reads a ``release.yaml`` whose release
  already ended elsewhere does not start it again.
- ``approvals``: per release digest and step, the distinct identities that approved it.

A release is identified by :func:`release_digest`, the SHA-256 of its spec's canonical JSON and its
model's name: the same file read by another pod gives the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REJECTED = "rejected"
READMITTED = "readmitted"
PROMOTED = "promoted"
ENDED = "ended"
APPROVED = "approved"
KINDS = (REJECTED, READMITTED, PROMOTED, ENDED, APPROVED)


def release_digest(model: str, spec_json: Mapping[str, Any]) -> str:
    """The release's identity: the same model and spec give the same digest on every replica."""
    text = json.dumps({"model": model, "spec": spec_json}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Verdict:
    """One decision about a model. ``at`` is wall-clock seconds; ``key`` orders ties and names the record."""

    kind: str
    model: str
    at: float
    version: int | None = None
    fingerprint: str | None = None
    reason: str = ""
    release: str = ""
    step: int | None = None
    identity: str = ""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, item: object) -> Verdict:
        """The record :meth:`to_json` wrote; ValueError when it is not one."""
        if not isinstance(item, dict) or item.get("kind") not in KINDS:
            raise ValueError("not a verdict record")
        version, step = item.get("version"), item.get("step")
        for number in (version, step):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
                raise ValueError(f"{number!r} is not a whole number")
        return cls(
            kind=str(item["kind"]),
            model=str(item["model"]),
            at=float(item["at"]),
            version=version,
            fingerprint=None if item.get("fingerprint") is None else str(item["fingerprint"]),
            reason=str(item.get("reason", "")),
            release=str(item.get("release", "")),
            step=step,
            identity=str(item.get("identity", "")),
        )


@dataclass(frozen=True)
class Rejection:
    """Why a version is kept out: its content when rejected (None: not fingerprinted yet), and when."""

    version: int
    fingerprint: str | None
    reason: str
    at: float

    def applies_to(self, fingerprint: str | None) -> bool:
        """Whether the folder holding ``fingerprint`` is the content that was rejected."""
        return self.fingerprint is None or fingerprint is None or self.fingerprint == fingerprint


@dataclass
class ModelVerdicts:
    """One model's records folded into what they decide."""

    rejected: dict[int, Rejection] = field(default_factory=dict)
    promoted: int | None = None
    ended: set[str] = field(default_factory=set)
    approvals: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    def apply(self, verdict: Verdict) -> None:
        """Fold one more record in; records must come oldest first."""
        if verdict.kind == REJECTED and verdict.version is not None:
            self.rejected[verdict.version] = Rejection(
                verdict.version, verdict.fingerprint, verdict.reason, verdict.at
            )
        elif verdict.kind == READMITTED and verdict.version is not None:
            self.rejected.pop(verdict.version, None)
        elif verdict.kind == PROMOTED and verdict.version is not None:
            self.promoted = verdict.version
            self.rejected.pop(verdict.version, None)
        elif verdict.kind == ENDED:
            self.ended.add(verdict.release)
        elif verdict.kind == APPROVED and verdict.step is not None:
            who = self.approvals.setdefault((verdict.release, verdict.step), [])
            if verdict.identity not in who:
                who.append(verdict.identity)

    def approvers(self, release: str, step: int) -> list[str]:
        """The distinct identities that approved ``step`` of ``release``, in the order they came."""
        return list(self.approvals.get((release, step), ()))


def fold(verdicts: Iterable[Verdict]) -> dict[str, ModelVerdicts]:
    """Every model's records, oldest first, folded per model."""
    folded: dict[str, ModelVerdicts] = {}
    for verdict in sorted(verdicts, key=lambda v: v.at):
        folded.setdefault(verdict.model, ModelVerdicts()).apply(verdict)
    return folded


def readmit_hint(model: str, version: int) -> str:
    """The command that lets a rejected version serve again, for every message that names one."""
    return f"`conch release readmit {model} {version}` (or `readmit: true` in a changed release.yaml)"


class VerdictBook:
    """The verdicts this server knows: those read from the store, plus its own not yet written there.

    ``unreadable`` holds why the store could not be read at start (empty once it has been): until then
    nobody here knows which versions are rejected, so none may serve.
    """

    def __init__(self) -> None:
        self._stored: list[Verdict] = []
        self._pending: list[Verdict] = []
        self._folded: dict[str, ModelVerdicts] = {}
        self.unreadable = ""
        #: Verdicts taken here that the store refused: in force here only, and shown as such.
        self.unshared: list[str] = []

    def of(self, model: str) -> ModelVerdicts:
        """``model``'s verdicts (empty when it has none)."""
        return self._folded.get(model) or ModelVerdicts()

    def models(self) -> list[str]:
        """The models with any verdict."""
        return sorted(self._folded)

    def add(self, verdict: Verdict) -> None:
        """A decision taken here, in force at once; :meth:`written` once the store holds it."""
        self._pending.append(verdict)
        self._refold()

    def written(self, pending: Verdict, stored: Verdict) -> None:
        """``pending`` reached the store as ``stored`` (with its fingerprint filled in)."""
        if pending in self._pending:
            self._pending.remove(pending)
        self._stored.append(stored)
        self._refold()

    def read(self, stored: list[Verdict]) -> set[str]:
        """Take the store's records; the models whose rejections or promotion changed."""
        before = {name: _served_part(v) for name, v in self._folded.items()}
        self._stored = list(stored)
        self.unreadable = ""
        self._refold()
        after = {name: _served_part(v) for name, v in self._folded.items()}
        return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}

    def _refold(self) -> None:
        self._folded = fold([*self._stored, *self._pending])


def _served_part(verdicts: ModelVerdicts) -> tuple[object, ...]:
    """What decides which versions load: a change here means the model must be loaded again."""
    rejected = sorted((n, r.fingerprint) for n, r in verdicts.rejected.items())
    return (tuple(rejected), verdicts.promoted)
