"""Builds an ensemble version at load: its plan checked, its steps checked where loaded, its scheduler.

Why the step models are checked only where they are loaded: models load in name order, so an
ensemble's steps may come after it, and in explicit mode they may never load. A step loaded now must
agree with the ensemble, or the ensemble is UNAVAILABLE with the disagreement as its reason; a step
not loaded yet is checked by the scheduler before the first request it would get, and until it is
READY, requests answer 503 naming it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import ConchError, InvalidArgumentError
from conch.models.model import ModelVersion
from conch.scheduling.ensemble.plan import EnsemblePlan, plan_ensemble
from conch.scheduling.ensemble.scheduler import EnsembleScheduler, Infer, StepModels, ensemble_steps
from conch.scheduling.ensemble.step_checks import nested_cycle, step_problems

log = logging.getLogger(__name__)


class EnsembleBuilder:
    """The loader's builder for ``platform: "ensemble"``; steps go to ``infer``, models from ``models``."""

    def __init__(self, infer: Infer, models: StepModels) -> None:
        self._infer = infer
        self._models = models

    def __call__(self, version: ModelVersion, folder: Path, fields: set[str]) -> None:
        config = version.config
        plan = plan_ensemble(config)
        loaded = self._loaded_step_configs(plan)
        problems = step_problems(config, plan, loaded)
        cycle = nested_cycle(config.name, plan, ensemble_steps(self._models))
        problems += [cycle] if cycle else []
        if problems:
            raise InvalidArgumentError(problems[0])
        later = sorted({step.model_name for step in plan.steps if step.index not in loaded})
        if later:
            log.info(
                "ensemble '%s': step model(s) %s not READY yet; they are checked at their first request",
                config.name,
                later,
            )
        # An ensemble's max_batch_size left out is 0, as in Triton: nothing is auto-completed.
        version.max_batch_size_completed = False
        version.scheduler = EnsembleScheduler(config, plan, self._infer, self._models, version.statistics)

    def _loaded_step_configs(self, plan: EnsemblePlan) -> dict[int, mc.ModelConfig]:
        configs = {}
        for step in plan.steps:
            model = self._models(step.model_name)
            if model is None:
                continue
            try:
                configs[step.index] = model.ready_version(step.model_version).config
            except ConchError:
                continue
        return configs
