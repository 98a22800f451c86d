"""One release step's traffic, counted as it comes for the local gate: answers and server errors per
version, latencies, shadow comparisons; :meth:`StepFigures.snapshot` gives the
:class:`~conch.release.gate.GateFigures` the gate judges."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from conch.release.compare import Comparison
from conch.release.gate import GateFigures, Role, VersionFigures
from conch.release.latency_sketch import LatencySketch
from conch.release.time_slices import TimeSlices


@dataclass
class _VersionTally:
    requests: int = 0
    server_errors: int = 0
    #: Latencies of the answers clients got, and of the shadow copies the version ran.
    answers: LatencySketch = field(default_factory=LatencySketch)
    copies: LatencySketch = field(default_factory=LatencySketch)
    #: How long the executions that answered took, client answers and copies alike.
    executions: LatencySketch = field(default_factory=LatencySketch)

    def latencies(self, copies: bool) -> LatencySketch:
        return self.answers.plus(self.copies) if copies else self.answers

    def figures(
        self, latencies: LatencySketch, span: tuple[int, int] | None, execution_span: tuple[int, int] | None
    ) -> VersionFigures:
        latency = None if span is None else latencies.histogram(*span)
        executions = self.executions
        return VersionFigures(
            self.requests,
            self.server_errors,
            latencies.quantile(0.95),
            latency,
            executions.quantile(0.95),
            None if execution_span is None else executions.histogram(*execution_span),
        )


class StepFigures:
    """One step's traffic as it comes, for the local gate. Make a new one (or :meth:`reset`) per step.

    Record answers that the version is responsible for: successes and server errors. A client error
    (a 400) says nothing about a version and is not recorded. Latencies are those of successful
    answers only, like ``conch_inference_request_duration_seconds``: a candidate that fails fast must
    not look faster. A version's first ``warming`` answers of the release are counted but not timed:
    a version loaded for the release answers its first few hundred requests up to 3 times slower
    (ONNX Runtime's first runs, a cold instance), which is not the version's speed. Likewise a step's
    answers while it is ``settling`` (the controller ends that a few seconds in): when the split
    changes, the version whose share rises queues for a moment while its batcher meets the new load.

    A shadow copy's time is kept apart from client answers' (``copy``): a copy starts once a client
    has its answer and never waits in the frontend, so a sample holding more copies differs from the
    same graph answering clients. Latencies are compared client answers against client answers
    whenever both versions answered clients in the step; copies count only where a version answers
    none (a dark launch at weight 0, the baseline at 100%). The same answers are also cut into time
    slices (:mod:`conch.release.time_slices`) for the latency test's noise between moments.

    Each timed answer's ``execution`` (the run of the batch that answered it) is kept too, for the
    compute check: copies and client answers alike, for an execution does not depend on who asked.
    """

    def __init__(
        self,
        drift_threshold: float,
        warming: int = 0,
        settling: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.drift_threshold = drift_threshold
        self.warming = warming
        self._clock = clock
        self._answered = dict.fromkeys(Role, 0)  # over the release: not reset with each step
        self.reset(settling)

    def reset(self, settling: bool = False) -> None:
        """Forget everything: a new step is judged on its own traffic. While ``settling`` (until
        :attr:`timing` is set), answers are counted but not timed."""
        self.timing = not settling
        self._tallies = {role: _VersionTally() for role in Role}
        #: The timed answers cut into time slices: client answers only, and with shadow copies.
        self._slices = TimeSlices(self._clock)
        self._slices_with_copies = TimeSlices(self._clock)
        self._execution_slices = TimeSlices(self._clock)
        self.compared = 0
        self.agreements = 0
        self.drift_scored = 0
        self.drifted = 0

    def record_answer(
        self,
        role: Role,
        seconds: float,
        server_error: bool,
        copy: bool = False,
        execution: float | None = None,
    ) -> None:
        """One answer of ``role``'s version, which took ``seconds`` end to end (a shadow ``copy``'s),
        ``execution`` of them in the execution that answered it (None: unknown)."""
        tally = self._tallies[role]
        tally.requests += 1
        self._answered[role] += 1
        if server_error:
            tally.server_errors += 1
        elif self.timing and self._answered[role] > self.warming:
            (tally.copies if copy else tally.answers).observe(seconds)
            candidate = role is Role.CANDIDATE
            self._slices_with_copies.observe(candidate, seconds)
            if not copy:
                self._slices.observe(candidate, seconds)
            if execution is not None:
                tally.executions.observe(execution)
                self._execution_slices.observe(candidate, execution)

    def record_comparison(self, comparison: Comparison) -> None:
        """One request answered by both versions and compared."""
        self.compared += 1
        self.agreements += comparison.agreed
        if comparison.drift is not None:
            self.drift_scored += 1
            self.drifted += comparison.drift > self.drift_threshold

    def snapshot(self) -> GateFigures:
        """The figures as they are now, for :func:`judge`; both versions' latencies in the same buckets."""
        base, cand = self._tallies[Role.BASELINE], self._tallies[Role.CANDIDATE]
        copies = not (base.answers.count and cand.answers.count)
        latencies = {role: tally.latencies(copies) for role, tally in self._tallies.items()}
        span = _common_span(latencies.values())
        execution_span = _common_span(tally.executions for tally in self._tallies.values())
        return GateFigures(
            baseline=base.figures(latencies[Role.BASELINE], span, execution_span),
            candidate=cand.figures(latencies[Role.CANDIDATE], span, execution_span),
            compared=self.compared,
            agreements=self.agreements,
            drift_scored=self.drift_scored,
            drifted=self.drifted,
            slice_log_ratios=tuple((self._slices_with_copies if copies else self._slices).log_ratios),
            execution_slice_log_ratios=tuple(self._execution_slices.log_ratios),
        )


def _common_span(sketches: Iterable[LatencySketch]) -> tuple[int, int] | None:
    """The buckets from the lowest to the highest any of ``sketches`` holds: both versions' samples
    in the same buckets. None when all are empty."""
    known = [span for span in (sketch.indices() for sketch in sketches) if span is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else None
