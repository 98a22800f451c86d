"""Releases declared outside the API: each model's ``release.yaml``, and the state dir after a restart.

A ``git push`` that Argo CD syncs starts, changes or stops a release through the file, so the server
reads it at start and after every poll scan: a file that appeared (or changed while no release is under
way) starts a release; a file removed while its release is under way rolls it back. A file changed while
its release runs is left for the person to roll back or promote first (logged). At start, every release
the state dir holds is taken over where it was, before the models load, so its versions load whatever
the version policy says.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from conch.core.errors import InvalidArgumentError
from conch.release.controller import ReleaseController
from conch.release.spec import ReleaseSpec, spec_from_yaml, spec_to_json
from conch.release.verdicts import release_digest

log = logging.getLogger(__name__)

RELEASE_FILE = "release.yaml"


def declared_spec(model_dir: Path) -> ReleaseSpec | None:
    """The model folder's ``release.yaml``, checked; None when there is none. Raises the spec's 400."""
    path = model_dir / RELEASE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return spec_from_yaml(text, f"{model_dir.name}/{RELEASE_FILE}")


def resume_saved(releases: ReleaseController) -> None:
    """Every release the state dir holds, for the models the repository has, taken over as it was."""
    if releases.store is None:
        return
    now = releases.clock()
    folders = {folder.name: folder for folder in releases.repository.model_folders()}
    for model in releases.store.models():
        if model not in folders:
            continue
        try:
            release = releases.store.load(model, now)
        except InvalidArgumentError as exc:
            log.error("release state of '%s' is unreadable, ignored: %s", model, exc.message)
            continue
        if release is None:
            continue
        # Declared by its file when the file still declares it; otherwise it came through the API.
        saved = spec_to_json(release.spec)
        releases.adopt(model, release, saved if _file_spec(folders[model]) == saved else None)


def reconcile_files(releases: ReleaseController) -> list[str]:
    """Start what a ``release.yaml`` declares anew, roll back what a removed one held; names acted on."""
    acted = []
    for folder in releases.repository.model_folders():
        model = folder.name
        held = releases.releases.get(model)
        try:
            spec = declared_spec(folder)
        except InvalidArgumentError as exc:
            log.error("%s", exc.message)
            continue
        if spec is None:
            if held is not None and held.file_spec is not None and held.release.state.active:
                releases.act(model, "rollback", f"{RELEASE_FILE} was removed", reject=False)
                acted.append(model)
            continue
        declared = spec_to_json(spec)
        if held is not None and held.file_spec == declared:
            continue
        digest = release_digest(model, declared)
        if digest in releases.book.of(model).ended:
            if digest not in releases.ended_seen:
                releases.ended_seen.add(digest)
                log.info(
                    "%s/%s declares release %s, which has ended; it is not started again",
                    model,
                    RELEASE_FILE,
                    digest,
                )
            continue
        if held is not None and held.release.state.active:
            log.warning(
                "%s/%s changed while its release is %s; roll it back or promote it before declaring another",
                model,
                RELEASE_FILE,
                held.release.state.value,
            )
            continue
        try:
            releases.start(model, spec, declared)
        except InvalidArgumentError as exc:
            log.error("%s/%s: %s", model, RELEASE_FILE, exc.message)
            continue
        acted.append(model)
    return acted


def _file_spec(model_dir: Path) -> dict[str, Any] | None:
    try:
        spec = declared_spec(model_dir)
    except InvalidArgumentError:
        return None
    return None if spec is None else spec_to_json(spec)
