"""The releases' figures for :mod:`conch.observability.release_metrics`, read from the controller."""

from __future__ import annotations

from conch.observability.release_metrics import ReleaseFigures
from conch.release.controller import ReleaseController
from conch.release.prometheus_judge import DRIFT_SCORE_BUCKETS
from conch.release.state import ReleaseState


def release_figures(releases: ReleaseController) -> list[ReleaseFigures]:
    """Every release's figures, by model name."""
    found = []
    for model, held in sorted(releases.releases.items()):
        release = held.release
        versions = (release.baseline, release.spec.candidate)
        found.append(
            ReleaseFigures(
                model=model,
                weights=release.weights(),
                states={each.value: int(release.state is each) for each in ReleaseState},
                compared=held.compared,
                agreements=held.agreements,
                dropped=held.dropped,
                rollbacks=held.rollbacks,
                answers={version: held.answers[version] for version in versions},
                server_errors={version: held.server_errors[version] for version in versions},
                drift_bounds=(*DRIFT_SCORE_BUCKETS, float("inf")),
                drift_counts=tuple(held.drift_buckets),
                drift_sum=held.drift_sum,
            )
        )
    return found


def rejected_versions(releases: ReleaseController) -> dict[str, dict[int, int]]:
    """Per model, 1 for each version a rollback rejected and nobody re-admitted, 0 for each one served."""
    book, served = releases.book, releases.repository.models
    found: dict[str, dict[int, int]] = {}
    for model in set(book.models()) | served.keys():
        flags = dict.fromkeys(served[model].versions, 0) if model in served else {}
        found[model] = flags | dict.fromkeys(book.of(model).rejected, 1)
    return found
