"""Changes what is served while it serves: Triton's model control modes, load, unload and poll.

- ``none``: the repository is loaded once at start; the load and unload API answers an error.
- ``explicit``: only ``--load-model`` names load at start (``*``: all); the API loads, reloads and
  unloads models.
- ``poll``: every ``--repository-poll-secs`` the folders are scanned; a new, changed or removed model
  folder is loaded, reloaded or unloaded.

**Hot swap with zero failed requests.** A load builds the new model aside on a worker thread
(sessions, warm-up) while the old versions keep answering; versions whose files and config are
unchanged are carried over as they are. The new model then replaces the old in one assignment on the
event loop. A request has already taken its version and counted itself pending before it awaits
anything, so it finishes on the version it started on. A version no longer served drains: it takes
no new requests, and its scheduler closes once its pending requests are answered.

**A failed load changes nothing that works.** When the new config or a new version fails, the versions
that were READY keep serving (outside the version policy if need be), the index shows the failure, and
the load call answers 400 with the reason.

**A folder still being written is not loaded.** Poll mode acts on a changed model folder only when two
fingerprints taken ``settle_secs`` apart agree (:mod:`conch.lifecycle.fingerprint`). ``conch install``
moves a finished version folder into place in one rename, so installing into a served repository
just works.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import ConchError, InvalidArgumentError, UnavailableError, did_you_mean
from conch.lifecycle.fingerprint import model_fingerprint
from conch.lifecycle.loader import ModelLoader
from conch.lifecycle.rejected_versions import RejectedVersion
from conch.models.model import Model, ModelVersion
from conch.models.served_models import ServedModels
from conch.observability.events import emit

log = logging.getLogger(__name__)


class ControlMode(enum.Enum):
    """Triton's ``--model-control-mode`` values."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class ControlSettings:
    """How the served models may change. ``startup_models`` is explicit mode's ``--load-model``."""

    mode: ControlMode = ControlMode.NONE
    poll_secs: float = 15.0
    startup_models: tuple[str, ...] = ()
    #: How long a changed folder must stay unchanged before poll mode loads it.
    settle_secs: float = 1.0
    #: The longest a replaced version may take to finish its requests before it is closed anyway.
    drain_timeout_secs: float = 30.0


class ModelControl:
    """Loads, swaps and unloads the models of one repository; the only writer of ``repository.models``."""

    def __init__(self, repository: ServedModels, loader: ModelLoader, settings: ControlSettings) -> None:
        self.repository = repository
        self.loader = loader
        self.settings = settings
        #: Called on a worker thread before each poll scan (an object store syncs its cache there).
        self.before_scan: Callable[[], object] | None = None
        #: Called after each poll scan (the releases read their ``release.yaml`` files then).
        self.after_scan: Callable[[], object] | None = None
        #: The versions of a model that must stay loaded whatever its policy says (a release's).
        self.pinned: Callable[[str], set[int]] = lambda name: set()
        #: The versions of a model a release rejected; raises a ConchError while nobody can tell.
        self.rejected: Callable[[str], Mapping[int, RejectedVersion]] = lambda name: {}
        self._lock = asyncio.Lock()
        self._fingerprints: dict[str, str] = {}
        self._drains: set[asyncio.Task[None]] = set()

    def load_startup(self) -> None:
        """Load what the mode says to load at start, before the server listens."""
        folders = self.repository.model_folders()
        if not folders:
            # Served as it is (an empty index, and ready), but someone pointed the server at the wrong
            # folder far more often than they meant to serve nothing.
            log.warning(
                "model repository %s has no model folders, so no model is served; a model is a folder "
                "<name>/ holding config.pbtxt and/or numeric version folders such as <name>/1/model.onnx",
                self.repository.root,
            )
        wanted = self._startup_names([folder.name for folder in folders])
        for folder in folders:
            if folder.name not in wanted:
                continue
            log.info("loading model '%s'", folder.name)
            self._fingerprints[folder.name] = model_fingerprint(folder)
            self.repository.models[folder.name] = self._built(folder, None, None)
        for missing in sorted(wanted - {folder.name for folder in folders}):
            reason = f"--load-model names '{missing}', which is not a folder of the model repository"
            log.error("model '%s' is UNAVAILABLE: %s", missing, reason)
            self.repository.models[missing] = Model(missing, reason=reason)

    async def load(self, name: str, override: mc.ModelConfig | None = None) -> None:
        """Load or reload ``name`` (explicit mode); raises 400 with the reason when it fails."""
        self._check_explicit()
        folder = self._folder(name)
        async with self._lock:
            self._fingerprints[name] = model_fingerprint(folder)
            failure = await self._load(folder, override)
        if failure:
            raise InvalidArgumentError(f"failed to load '{name}': {failure}")

    async def unload(self, name: str) -> None:
        """Stop serving ``name`` (explicit mode) once its requests in flight are answered."""
        self._check_explicit()
        async with self._lock:
            self.repository.model(name)  # a 404 for a name never served
            await self._unload(name, Model(name, reason="unloaded", unloaded=True))

    async def poll_forever(self) -> None:
        """Poll mode's loop: scan, then sleep ``poll_secs``, until cancelled."""
        while True:
            await asyncio.sleep(self.settings.poll_secs)
            try:
                await self.poll()
            except Exception:  # a scan must never end polling; the next one tries again
                log.exception("polling the model repository failed")

    async def poll(self) -> list[str]:
        """One scan: load new and changed model folders, unload removed ones; the names acted on."""
        async with self._lock:
            if self.before_scan is not None:
                await asyncio.to_thread(self.before_scan)
            folders = {folder.name: folder for folder in self.repository.model_folders()}
            acted = []
            for name, folder in folders.items():
                seen = model_fingerprint(folder)
                if seen == self._fingerprints.get(name) or not await self._settled(folder, seen):
                    continue
                self._fingerprints[name] = seen
                await self._load(folder, None)
                acted.append(name)
            for name in sorted(self.repository.models.keys() - folders.keys()):
                self._fingerprints.pop(name, None)
                await self._unload(name, None)
                acted.append(name)
        if self.after_scan is not None:
            self.after_scan()
        return acted

    async def refresh(self, name: str) -> None:
        """Load ``name`` again, whatever the mode: the versions it must keep loaded changed."""
        async with self._lock:
            folder = self.repository.root / name
            if name in self.repository.models and folder.is_dir():
                await self._load(folder, None)

    async def drained(self) -> None:
        """Wait for every version being drained to close (tests and shutdown)."""
        while self._drains:
            await asyncio.gather(*list(self._drains), return_exceptions=True)

    async def _settled(self, folder: Path, seen: str) -> bool:
        await asyncio.sleep(self.settings.settle_secs)
        return model_fingerprint(folder) == seen

    async def _load(self, folder: Path, override: mc.ModelConfig | None) -> str:
        """Build ``folder``'s model aside, then swap it in; the failure's reason, or ``""``."""
        name = folder.name
        previous = self.repository.models.get(name)
        if previous is None:
            self.repository.loading.add(name)
        try:
            built = await asyncio.to_thread(self._built, folder, override, previous)
        finally:
            self.repository.loading.discard(name)
        failure = _failure(built)
        served = _keep_working_versions(built, previous, failure) if failure else built
        if not failure:
            for version in served.versions.values():
                version.reason = ""  # a version kept through an earlier failed reload is whole again
        self._swap(name, served, previous)
        emit(
            log, "model_swapped" if previous else "model_served", model=name, versions=sorted(served.versions)
        )
        return failure

    def _built(self, folder: Path, override: mc.ModelConfig | None, previous: Model | None) -> Model:
        """The model in ``folder``, built with the versions its release holds and those it rejected."""
        try:
            rejected = self.rejected(folder.name)
        except ConchError as exc:
            emit(log, "model_unavailable", logging.ERROR, model=folder.name, reason=exc.message)
            return Model(folder.name, reason=exc.message)
        return self.loader.load(folder, override, previous, frozenset(self.pinned(folder.name)), rejected)

    async def _unload(self, name: str, replacement: Model | None) -> None:
        previous = self.repository.models.get(name)
        if replacement is None:
            self.repository.models.pop(name, None)
        else:
            self.repository.models[name] = replacement
        for version in previous.versions.values() if previous else []:
            self._drain(version)
        emit(log, "model_unloaded", model=name)
        await self.drained()

    def _swap(self, name: str, served: Model, previous: Model | None) -> None:
        self.repository.models[name] = served
        kept = {id(version) for version in served.versions.values()}
        for version in previous.versions.values() if previous else []:
            if id(version) not in kept:
                self._drain(version)

    def _drain(self, version: ModelVersion) -> None:
        self.repository.draining.append(version)
        task = asyncio.get_running_loop().create_task(self._close_when_idle(version))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _close_when_idle(self, version: ModelVersion) -> None:
        deadline = asyncio.get_running_loop().time() + self.settings.drain_timeout_secs
        while version.statistics.pending > 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        version.close()
        self.repository.draining.remove(version)
        emit(log, "version_unloaded", model=version.name, version=version.version)

    def _check_explicit(self) -> None:
        if self.settings.mode is not ControlMode.EXPLICIT:
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled or the model control "
                f"mode is none; this server runs with --model-control-mode {self.settings.mode.value}, "
                "start it with --model-control-mode explicit to load and unload through the API"
            )

    def _folder(self, name: str) -> Path:
        folders = {folder.name: folder for folder in self.repository.model_folders()}
        if name not in folders:
            raise InvalidArgumentError(
                f"failed to load '{name}': the model repository has no model folder '{name}'"
                f"{did_you_mean(name, folders)}"
            )
        return folders[name]

    def _startup_names(self, names: list[str]) -> set[str]:
        if self.settings.mode is not ControlMode.EXPLICIT or "*" in self.settings.startup_models:
            return set(names)
        return set(self.settings.startup_models)


def _failure(model: Model) -> str:
    if model.reason:
        return model.reason
    reasons = [f"version {n}: {v.reason}" for n, v in sorted(model.versions.items()) if not v.ready]
    return "; ".join(reasons)


def _keep_working_versions(built: Model, previous: Model | None, failure: str) -> Model:
    """The new model, with the previously READY versions kept where the new ones failed."""
    working = [v for v in previous.versions.values() if v.ready] if previous else []
    if not working:
        return built
    if built.reason:  # the config itself failed: nothing new to serve
        served = Model(built.name, config_text=previous.config_text if previous else "")
    else:
        served = built
    for version in working:
        replacement = served.versions.get(version.version)
        if replacement is None or not replacement.ready:
            version.reason = f"kept serving: the reload failed: {failure}"
            served.versions[version.version] = version
    served.degraded = failure
    return served
