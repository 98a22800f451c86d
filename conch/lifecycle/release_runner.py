"""How ``conch serve`` runs releases: their controller over the repository, its saved state, the shared
store of verdicts, and the periodic judgement of every release's gate."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch.lifecycle.fingerprint import content_fingerprint
from conch.lifecycle.model_control import ControlMode, ModelControl
from conch.models.served_models import ServedModels
from conch.observability.events import emit
from conch.release.controller import ReleaseController
from conch.release.declarations import reconcile_files, resume_saved
from conch.release.state import ReleaseState
from conch.release.store import ReleaseStore
from conch.release.verdict_store import VERDICTS_FOLDER, VerdictStore, VerdictStoreError
from conch.release.verdicts import REJECTED, Verdict
from conch.scheduling.shared_turns import share_turns

log = logging.getLogger(__name__)

#: Seconds between two judgements of every release's gate. A 10% canary at 2,000 requests/s answers
#: 200 requests a second, and with failure_threshold 2 a candidate with shuffled labels is rolled back
#: at the second failed look: looks a quarter-second apart let 98 and 99 of its answers reach clients
#: on the served bench. A judgement between the latency test's looks costs about 1 ms (20,000 answers
#: a version), so ten a second take 1% of a core while a release runs. The bounds are valid at every
#: look, so looking more often does not raise the false-rollback rate.
RELEASE_CHECK_SECS = 0.1


def default_store(repository: Path) -> str:
    """Where verdicts go when ``--release-store`` is empty: beside the models, in a hidden folder of the
    repository (of the bucket, for an ``s3://`` one), so that every server of the repository shares it."""
    try:
        url = json.loads((repository.parent / "source.json").read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return str(repository / VERDICTS_FOLDER)
    return f"{str(url).rstrip('/')}/{VERDICTS_FOLDER}"


def release_controller(
    repository: ServedModels, control: ModelControl, state_dir: str, store_location: str
) -> tuple[ReleaseController, VerdictStore]:
    """The releases of this repository, saved in ``state_dir`` (``--state-dir``; empty: ``.conch-state``
    beside the repository) with their verdicts in the store at ``store_location`` (``--release-store``;
    empty: :func:`default_store`); a release's pinned versions stay loaded, its rejected ones stay
    out, and ``release.yaml`` files are read after each poll scan."""
    saved = Path(state_dir) if state_dir else repository.root.parent / ".conch-state"
    store = VerdictStore(store_location or default_store(repository.root))
    releases = ReleaseController(repository, ReleaseStore(saved))
    releases.folders_appear = control.settings.mode is not ControlMode.NONE
    control.pinned = releases.pinned
    control.rejected = releases.rejected
    control.after_scan = lambda: reconcile_files(releases)
    background: set[asyncio.Task[None]] = set()

    def keep(task: asyncio.Task[None]) -> None:
        background.add(task)
        task.add_done_callback(background.discard)

    async def refresh(name: str) -> None:
        await control.refresh(name)
        releases.versions_loaded(name)

    def reload(name: str) -> None:
        keep(asyncio.get_running_loop().create_task(refresh(name)))

    def write(verdict: Verdict) -> None:
        keep(asyncio.get_running_loop().create_task(_written(releases, store, repository.root, verdict)))

    releases.on_pinned_changed = reload
    releases.on_verdict = write
    return releases, store


def audit_verdicts(releases: ReleaseController, write_line: Callable[[dict[str, Any]], None]) -> None:
    """Each verdict decided on this server (a rejection, a promotion, an approval, a re-admission, with
    who took it) is also handed to ``write_line``: ``--audit-log``'s file."""
    written = releases.on_verdict

    def audited(verdict: Verdict) -> None:
        write_line(verdict.to_json())
        if written is not None:
            written(verdict)

    releases.on_verdict = audited


async def take_over(releases: ReleaseController, store: VerdictStore, poll_secs: float) -> None:
    """Before the models load: the shared verdicts (tried for two polls, 10 s by default), the releases
    the state dir saved, then what each ``release.yaml`` declares."""
    await asyncio.to_thread(read_at_start, releases, store, 2 * poll_secs)
    resume_saved(releases)
    reconcile_files(releases)


def read_at_start(releases: ReleaseController, store: VerdictStore, wait_s: float) -> None:
    """Read every verdict before anything loads. A store that cannot be read within ``wait_s`` leaves
    every model UNAVAILABLE with the reason (fail closed: a rejected version must never serve because
    the record of its rejection was out of reach); :func:`follow_store` loads them once it answers."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            releases.book.read(store.read())
            return
        except VerdictStoreError as exc:
            if time.monotonic() >= deadline:
                releases.book.unreadable = (
                    f"{exc}; no version is served until it answers, so that a version a release rejected "
                    "never serves (set --release-store to a store every replica can read)"
                )
                log.error("%s", releases.book.unreadable)
                return
            time.sleep(1.0)


async def follow_store(releases: ReleaseController, store: VerdictStore, poll_secs: float) -> None:
    """Every ``poll_secs``, read what other replicas decided: a model whose rejections or promotion
    changed loads again (a version rejected elsewhere stops serving here within one poll), and an active
    release whose candidate was rejected elsewhere is rolled back here too."""
    while True:
        await asyncio.sleep(poll_secs)
        was_unreadable = bool(releases.book.unreadable)
        try:
            stored = await asyncio.to_thread(store.read)
        except VerdictStoreError as exc:
            log.warning("%s; the verdicts known here stay in force", exc)
            continue
        changed = releases.book.read(stored)
        if was_unreadable:
            log.info("release store %s answers: loading the models", store)
            changed = {folder.name for folder in releases.repository.model_folders()}
        for model in sorted(changed):
            releases.rejected_elsewhere(model)
            if releases.on_pinned_changed is not None:
                releases.on_pinned_changed(model)


async def _written(releases: ReleaseController, store: VerdictStore, root: Path, verdict: Verdict) -> None:
    """Write one verdict (a rejection with its content fingerprint), off the event loop."""
    stored = verdict
    try:
        if verdict.kind == REJECTED and verdict.version is not None and verdict.fingerprint is None:
            version_dir = root / verdict.model / str(verdict.version)
            if version_dir.is_dir():
                fingerprint = await asyncio.to_thread(content_fingerprint, version_dir)
                stored = dataclasses.replace(verdict, fingerprint=fingerprint)
        await asyncio.to_thread(store.append, stored)
    except VerdictStoreError as exc:
        emit(
            log, "verdict_not_shared", logging.ERROR, model=verdict.model, kind=verdict.kind, reason=str(exc)
        )
        releases.book.unshared.append(f"{verdict.kind} of {verdict.model}: {exc}")
        return
    releases.book.written(verdict, stored)


async def check_releases(releases: ReleaseController) -> None:
    """Judge every release every ``RELEASE_CHECK_SECS``; a failed round never ends the checks. After
    each round, the versions of a model take turns on the cores (:mod:`conch.scheduling.shared_turns`)
    where both answer clients (:func:`both_answer_clients`)."""
    while True:
        await asyncio.sleep(RELEASE_CHECK_SECS)
        try:
            await releases.check_off_loop()
        except Exception:
            log.exception("checking the releases failed")
        share_turns({model for model in releases.releases if both_answer_clients(releases, model)})


def both_answer_clients(releases: ReleaseController, model: str) -> bool:
    """Whether ``model``'s release sends clients to both versions now: a step strictly between 0% and
    100%, under way or paused. Only then do the versions take turns: in a dark launch (0%) the
    candidate runs copies alone, and its executions must not hold the baseline's clients back."""
    held = releases.releases.get(model)
    split = releases.split(model)
    if held is None or split is None:
        return False
    return held.release.state in (ReleaseState.PROGRESSING, ReleaseState.PAUSED) and 0 < split[2] < 100
