"""How ``conch serve`` runs releases: their controller over the repository, its saved state, and the
periodic judgement of every release's gate."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from conch.lifecycle.model_control import ModelControl
from conch.release.controller import ReleaseController
from conch.release.declarations import reconcile_files
from conch.release.store import ReleaseStore
from conch.repository.model_repository import ModelRepository

log = logging.getLogger(__name__)

#: Seconds between two judgements of every release's gate.
RELEASE_CHECK_SECS = 1.0


def release_controller(
    repository: ModelRepository, control: ModelControl, state_dir: Path
) -> ReleaseController:
    """The releases of this repository, saved in ``state_dir`` (``--state-dir``); a release's pinned
    versions stay loaded, and ``release.yaml`` files are read after each poll scan."""
    releases = ReleaseController(repository, ReleaseStore(state_dir))
    control.pinned = releases.pinned
    control.after_scan = lambda: reconcile_files(releases)
    refreshing: set[asyncio.Task[None]] = set()

    async def refresh(name: str) -> None:
        await control.refresh(name)
        releases.versions_loaded(name)

    def reload(name: str) -> None:
        task = asyncio.get_running_loop().create_task(refresh(name))
        refreshing.add(task)
        task.add_done_callback(refreshing.discard)

    releases.on_pinned_changed = reload
    return releases


async def check_releases(releases: ReleaseController) -> None:
    """Judge every release every ``RELEASE_CHECK_SECS``; a failed round never ends the checks."""
    while True:
        await asyncio.sleep(RELEASE_CHECK_SECS)
        try:
            await releases.check_off_loop()
        except Exception:
            log.exception("checking the releases failed")
