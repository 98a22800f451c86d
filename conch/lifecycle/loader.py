"""Builds a servable :class:`Model` from its repository folder: config, sessions, warm-up, schedulers.

Loading is blocking work (ONNX Runtime sessions, warm-up runs), so the lifecycle runs it on a worker
thread while the versions already served keep answering; nothing here touches what is served. A
failure (unparsable config, wrong name, a file that is not ONNX, a config that disagrees with the
graph, a failed warm-up) is recorded on the model or version as UNAVAILABLE with its reason, never
raised, so one broken model never stops the others.

A version whose files and config have not changed since the model was last loaded is reused as it is,
instance threads and statistics included: a reload changes only what changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends import onnxruntime as ort_backend
from conch.backends.kinds import BackendKind, backend_kind, infer_backend
from conch.core.contracts import read_contract
from conch.core.errors import ConchError, UnavailableError
from conch.lifecycle.builders.onnx_models import OnnxModelBuilder
from conch.lifecycle.fingerprint import config_text, version_fingerprint
from conch.lifecycle.load_options import LoadOptions
from conch.lifecycle.rejected_versions import RejectedVersion, rejected_note, still_rejected
from conch.models.circuit_breaker import (
    CircuitBreaker,
    Transition,
    settings_from_config,
)
from conch.models.fallback import (
    FallbackPolicy,
    FallbackReason,
    policy_from_config,
    strategy_from_config,
)
from conch.models.model import Model, ModelState, ModelVersion
from conch.models.strategy import FallbackLevel
from conch.observability.events import emit
from conch.observability.model_loads import record_load
from conch.repository import autocomplete, config_validation
from conch.repository.config import fields_set_in_text, parse_config
from conch.repository.quantized_twin import twin_from_config
from conch.repository.version_policy import select_versions, version_folders

log = logging.getLogger(__name__)


#: Builds one version of a non-ONNX model: ``(version, model folder, fields set in config.pbtxt)``.
VersionBuilder = Callable[[ModelVersion, Path, set[str]], None]


class ModelLoader:
    """Loads model folders with one set of options."""

    def __init__(self, options: LoadOptions | None = None) -> None:
        self.options = options or LoadOptions()
        self.onnx = OnnxModelBuilder(self.options)
        #: How versions of the other backends are built (python, ensemble), each by its own package;
        #: a builder completes ``version.config`` and sets ``version.scheduler`` or raises a ConchError.
        self.builders: dict[BackendKind, VersionBuilder] = {}

    def load(
        self,
        folder: Path,
        override: mc.ModelConfig | None = None,
        previous: Model | None = None,
        pinned: frozenset[int] = frozenset(),
        rejected: Mapping[int, RejectedVersion] | None = None,
    ) -> Model:
        """The model in ``folder``; ``override`` replaces its ``config.pbtxt`` (Triton's load parameter).

        Versions of ``previous`` whose folder and config are unchanged are carried over, not rebuilt;
        ``pinned`` versions (a release's) load whatever the policy says; ``rejected`` ones never do.
        """
        started = time.perf_counter()
        model = self._build(folder, override, previous, pinned, rejected or {})
        seconds = time.perf_counter() - started
        record_load(folder.name, seconds, succeeded=bool(model.ready_versions))
        emit(
            log,
            "model_loaded",
            model=folder.name,
            ready=[n for n, v in sorted(model.versions.items()) if v.ready],
            unavailable=[n for n, v in sorted(model.versions.items()) if not v.ready],
            seconds=round(seconds, 3),
        )
        return model

    def _build(
        self,
        folder: Path,
        override: mc.ModelConfig | None,
        previous: Model | None,
        pinned: frozenset[int],
        rejected: Mapping[int, RejectedVersion],
    ) -> Model:
        model = Model(folder.name)
        try:
            config, fields, text = self._config(folder, override)
            infer_backend(config, folder)
            autocomplete.complete_defaults(config, folder.name)
            config_validation.check_identity(config, folder.name)
            model.twin = twin_from_config(config, gpu=ort_backend.gpu_available())
        except ConchError as exc:
            model.reason = exc.message
            emit(log, "model_unavailable", logging.ERROR, model=folder.name, reason=exc.message)
            return model
        model.config_text = text
        model.rejected = still_rejected(folder, rejected)
        available = [n for n in version_folders(folder) if n not in model.rejected]
        # A release holds its two versions loaded whatever the policy says.
        selected = select_versions(config.version_policy, available)
        if model.twin is not None:  # an int8 twin and its fp32 version share a slot of the policy
            selected = model.twin.served_versions(selected, available)
        numbers = sorted(set(selected) | (pinned & set(available)))
        if not numbers:
            model.reason = "no version folder matches the version policy" + rejected_note(model.rejected)
            emit(log, "model_unavailable", logging.ERROR, model=folder.name, reason=model.reason)
        try:  # the strategy first: a bad one loads nothing
            policy = FallbackPolicy(strategy_from_config(config, self.options.fallback_levels))
        except ConchError as exc:
            model.reason = exc.message
            emit(log, "model_unavailable", logging.ERROR, model=model.name, reason=exc.message)
            return model
        for number in numbers:
            model.versions[number] = self._version(folder, number, config, fields, text, previous, policy)
        if policy.allows(FallbackLevel.MODEL) and numbers:
            self._load_last_known_good(model, folder, available, config, fields, text, previous, policy)
        ready = [v for _, v in sorted(model.versions.items()) if v.ready]
        completed = ready[-1].config if ready else config
        model.max_batch_size = completed.max_batch_size
        model.fallback = self._policy(model, config, completed)  # the business default fits the outputs
        if model.fallback is None:
            _close_new(model, previous)
        return model

    def _version(
        self,
        folder: Path,
        number: int,
        config: mc.ModelConfig,
        fields: set[str],
        text: str,
        previous: Model | None,
        policy: FallbackPolicy | None,
    ) -> ModelVersion:
        fingerprint = version_fingerprint(folder / str(number))
        kept = _unchanged(previous, number, text, fingerprint)
        if kept is not None:
            return kept
        version = self._load_version(folder, number, config, fields, policy)
        version.fingerprint = fingerprint
        return version

    def _load_last_known_good(
        self,
        model: Model,
        folder: Path,
        available: list[int],
        config: mc.ModelConfig,
        fields: set[str],
        text: str,
        previous: Model | None,
        policy: FallbackPolicy,
    ) -> None:
        """The MODEL fallback's version: the newest earlier one that loads, kept outside the policy.

        When every version the policy names failed, it stands in for them (requests go to it, marked);
        otherwise it waits as a standby for the day the newest version's circuit opens.
        """
        newest_failed = not any(v.ready for v in model.versions.values())
        reason = _failure_reason(model) if newest_failed else None
        for number in sorted((n for n in available if n < min(model.versions)), reverse=True):
            version = self._version(folder, number, config, fields, text, previous, policy)
            if not version.ready:
                continue
            version.stands_in = reason
            version.standby = not newest_failed
            version.reason = (
                f"standing in for newer versions that failed ({reason.value})"
                if reason
                else "standby: the MODEL fallback's last known good version"
            )
            model.versions[number] = version
            if reason is not None:
                model.degraded = f"version {number} stands in for newer versions that failed ({reason.value})"
            return

    def _policy(self, model: Model, config: mc.ModelConfig, outputs: mc.ModelConfig) -> FallbackPolicy | None:
        try:
            return policy_from_config(config, self.options.fallback_levels, outputs)
        except ConchError as exc:
            model.reason = exc.message  # a bad strategy or business default fails the whole model
            emit(log, "model_unavailable", logging.ERROR, model=model.name, reason=exc.message)
            return None

    @staticmethod
    def _config(folder: Path, override: mc.ModelConfig | None) -> tuple[mc.ModelConfig, set[str], str]:
        if override is not None:
            config = mc.ModelConfig()
            config.CopyFrom(override)
            return config, {f.name for f, _ in override.ListFields()}, config_text(override)
        path = folder / "config.pbtxt"
        if not path.exists():
            return mc.ModelConfig(), set(), ""
        text = path.read_text(encoding="utf-8", errors="replace")
        config = parse_config(text)
        return config, fields_set_in_text(config, text), text

    def _load_version(
        self,
        folder: Path,
        number: int,
        base: mc.ModelConfig,
        fields: set[str],
        policy: FallbackPolicy | None = None,
    ) -> ModelVersion:
        config = mc.ModelConfig()
        config.CopyFrom(base)
        version = ModelVersion(folder.name, number, config)
        version.max_batch_size_completed = "max_batch_size" not in fields
        try:
            contract = read_contract(folder / str(number))  # a malformed one loads nothing
            kind = backend_kind(config)
            if kind is BackendKind.ONNX:
                version.breaker = self._breaker(version, config)
                where = self.onnx.build(version, folder, fields, policy)
            else:
                build = self.builders.get(kind)
                if build is None:
                    raise UnavailableError(f"this server cannot run {kind.value} models")
                build(version, folder, fields)
                where = f"{kind.value} backend"
            if contract is not None:
                try:
                    contract.check_config(version.config)
                except ConchError:
                    version.close()
                    raise
                version.contract = contract
        except ConchError as exc:
            version.reason = exc.message
            emit(
                log,
                "version_unavailable",
                logging.ERROR,
                model=folder.name,
                version=number,
                reason=exc.message,
            )
            return version
        version.state = ModelState.READY
        log.info("model '%s' version %d is READY (%s)", folder.name, number, where)
        return version

    def _breaker(self, version: ModelVersion, config: mc.ModelConfig) -> CircuitBreaker | None:
        settings = settings_from_config(
            config, self.options.breaker_defaults, on_by_default=self.options.breakers_on
        )
        if settings is None:
            return None

        def report(change: Transition) -> None:
            emit(
                log,
                "circuit_breaker_transition",
                logging.WARNING,
                model=version.name,
                version=version.version,
                from_state=change.from_state.label,
                to=change.to_state.label,
                failure_rate=change.failure_rate,
                slow_call_rate=change.slow_call_rate,
            )

        return CircuitBreaker(settings, on_transition=report)


def _close_new(model: Model, previous: Model | None) -> None:
    """A model refused after its versions were built: stop what this load started, serve nothing new."""
    kept = {id(v) for v in previous.versions.values()} if previous else set()
    for version in model.versions.values():
        if id(version) not in kept:
            version.close()
    model.versions.clear()


def _failure_reason(model: Model) -> FallbackReason:
    reasons = " ".join(v.reason for v in model.versions.values())
    return (
        FallbackReason.WARMUP_FAILED
        if "warm-up" in reasons or "warmup" in reasons
        else FallbackReason.LOAD_FAILED
    )


def _unchanged(previous: Model | None, number: int, text: str, fingerprint: str) -> ModelVersion | None:
    if previous is None or previous.config_text != text:
        return None
    version = previous.versions.get(number)
    if version is None or not version.ready or version.fingerprint != fingerprint:
        return None
    return version
