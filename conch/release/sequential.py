"""Sequential tests for the release gate: pure statistics, no clock, no I/O.

The gate looks at a step's figures ten times a second. A fixed-sample interval re-read at every look is
wrong far more often than its level says: each look is another chance for noise to cross the limit.
So every decision here is **always valid**: the chance that it is ever wrong, over all the looks of a
step, is at most its ``alpha``.

- **A rate** (agreement, drift, server errors): a Beta-mixture martingale (Robbins' mixture
  sequential probability ratio test). For a Bernoulli rate ``p`` after ``k`` events in ``n``
  trials, ``M(p) = B(a + k, b + n - k) / B(a, b) / (p**k * (1 - p)**(n - k))`` is a martingale of
  mean 1 when ``p`` is the true rate, so by Ville's inequality it ever reaches ``1 / alpha`` with
  probability at most ``alpha``. The rates ``p`` with ``M(p) < 1 / alpha`` form a confidence
  sequence: an interval that holds the true rate at every look at once.
- **Latency**: looks only when the smaller sample has doubled (200, 400, 800... answers: a P95 read
  from fewer rests on fewer than 10 answers above it), and the ``k``-th look spends
  ``alpha * 6 / (pi**2 * k**2)``: the sum over every look is ``alpha``. At a look, the log ratio of
  the P95s, and a rank test of the candidate's latencies divided by the minimum effect size, get
  their noise from random splits of the baseline's own samples (a version against itself), so no
  replay is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: The Beta prior of the mixture. Jeffreys' ``Beta(1/2, 1/2)`` puts weight near 0 and 1, where the
#: gate's rates live (agreement near 1, drift and errors near 0): a shuffled-label candidate is
#: rolled back after about 10 comparisons, and a candidate at 99.5% agreement passes a 98% limit after
#: about 900 (:mod:`bench.release_gate_cases`).
PRIOR = (0.5, 0.5)
#: Answers each version needs before the first latency look; the looks follow at each doubling.
FIRST_LATENCY_LOOK = 200
#: Random splits of the baseline's samples that give the latency noise.
NOISE_SPLITS = 200


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def log_evidence(events: float, trials: float, rate: float) -> float:
    """``log M(rate)``: how strongly ``events`` in ``trials`` speak against a true rate of ``rate``."""
    a, b = PRIOR
    k, n = events, trials
    if n <= 0:
        return 0.0
    mixture = _log_beta(a + k, b + n - k) - _log_beta(a, b)
    if rate <= 0.0:
        return math.inf if k > 0 else mixture
    if rate >= 1.0:
        return math.inf if k < n else mixture
    return mixture - k * math.log(rate) - (n - k) * math.log1p(-rate)


@dataclass(frozen=True)
class RateBound:
    """A rate's confidence sequence at one look: ``lower <= rate <= upper`` holds at every look at
    once with probability at least ``1 - alpha``."""

    estimate: float | None
    lower: float
    upper: float


def rate_bound(events: float, trials: float, alpha: float) -> RateBound:
    """The confidence sequence of a rate after ``events`` in ``trials`` (``[0, 1]`` before any)."""
    if trials <= 0:
        return RateBound(None, 0.0, 1.0)
    estimate = min(max(events / trials, 0.0), 1.0)
    threshold = math.log(1 / alpha)

    def outside(rate: float) -> bool:
        return log_evidence(events, trials, rate) >= threshold

    def edge(inside: float, out: float) -> float:
        for _ in range(50):  # bisection to 1e-15 of the unit interval
            middle = (inside + out) / 2
            inside, out = (inside, middle) if outside(middle) else (middle, out)
        return inside

    lower = 0.0 if not outside(0.0) else edge(estimate, 0.0)
    upper = 1.0 if not outside(1.0) else edge(estimate, 1.0)
    return RateBound(estimate, lower, upper)


class Verdict:
    """What a bound says about a figure against its limit."""

    WITHIN = "within"  # the bound says the candidate keeps the limit
    BEYOND = "beyond"  # the bound says the candidate breaks it
    UNSURE = "unsure"  # the bound straddles the limit: keep collecting


def rate_verdict(events: float, trials: float, limit: float, alpha: float, at_least: bool) -> str:
    """Whether a rate is at least (``at_least``) or at most ``limit``, by the mixture test at the limit.

    The evidence against ``rate == limit`` is the smallest over every rate on the far side of the limit
    (the log-likelihood is convex with its minimum at the estimate), so one figure decides both ways.
    """
    if trials <= 0:
        return Verdict.UNSURE
    estimate = events / trials
    if log_evidence(events, trials, limit) < math.log(1 / alpha) or estimate == limit:
        return Verdict.UNSURE
    above = estimate > limit
    return Verdict.WITHIN if above == at_least else Verdict.BEYOND


@dataclass(frozen=True)
class LatencyHistogram:
    """Latencies counted in contiguous buckets: bucket ``i`` holds ``(bounds[i - 1], bounds[i]]``, the
    first ``(lowest, bounds[0]]``. A last bucket of ``inf`` reads as its lower bound, as Prometheus's
    ``histogram_quantile`` does."""

    lowest: float
    bounds: tuple[float, ...]
    counts: tuple[float, ...]

    @property
    def total(self) -> float:
        return float(sum(self.counts))


def quantile_of(histogram: LatencyHistogram, counts: np.ndarray, q: float) -> float | None:
    """The ``q`` quantile of ``counts`` in ``histogram``'s buckets, interpolated linearly inside its
    bucket (``histogram_quantile``'s rule); None when empty."""
    total = float(counts.sum())
    if total <= 0:
        return None
    rank = q * total
    cumulative = np.cumsum(counts)
    index = int(np.searchsorted(cumulative, rank, side="left"))
    index = min(index, len(counts) - 1)
    lower = histogram.lowest if index == 0 else histogram.bounds[index - 1]
    upper = histogram.bounds[index]
    if math.isinf(upper):
        return lower
    before = float(cumulative[index - 1]) if index > 0 else 0.0
    inside = float(counts[index])
    share = (rank - before) / inside if inside > 0 else 1.0
    return lower + (upper - lower) * min(max(share, 0.0), 1.0)


@dataclass(frozen=True)
class LatencyComparison:
    """Two tests of the candidate's latencies against the baseline's, with their noise from the
    baseline against itself, at this look's share of alpha (half to each test).

    - ``log_ratio``: log of candidate P95 / baseline P95; ``noise`` its standard deviation at these
      sample sizes, ``bound`` how far it may be off (``z * noise``).
    - ``rank_excess``: P(candidate latency / (1 + max_increase) > baseline latency) - 1/2, the rank
      (Mann-Whitney) statistic of the candidate slowed by more than the minimum effect size; above
      ``rank_bound``, the whole candidate distribution is slower than that: a rise that the P95 of a
      few hundred answers is too noisy to prove.
    """

    log_ratio: float
    noise: float
    bound: float
    rank_excess: float = 0.0
    rank_bound: float = math.inf
    #: Time slices the noise between moments came from; None where the judge does not slice.
    slices: int | None = None

    @property
    def increase(self) -> float:
        """Candidate P95 / baseline P95 - 1."""
        return math.exp(self.log_ratio) - 1


def _centres(histogram: LatencyHistogram) -> np.ndarray:
    """Each bucket's middle (its lower bound for a last bucket of ``inf``)."""
    upper = np.asarray(histogram.bounds, dtype=np.float64)
    lower = np.concatenate([[histogram.lowest], upper[:-1]])
    return np.where(np.isinf(upper), lower, (lower + upper) / 2)


def rank_statistic(base_at: np.ndarray, base: np.ndarray, cand_at: np.ndarray, cand: np.ndarray) -> float:
    """P(candidate > baseline) + P(equal) / 2 of two samples given as counts at (sorted) values."""
    cumulative = np.concatenate([[0.0], np.cumsum(base, dtype=np.float64)])
    below = cumulative[np.searchsorted(base_at, cand_at, side="left")]
    equal = cumulative[np.searchsorted(base_at, cand_at, side="right")] - below
    return float((cand * (below + equal / 2)).sum() / (cand.sum() * base.sum()))


def compare_latency(
    baseline: LatencyHistogram,
    candidate: LatencyHistogram,
    alpha: float,
    max_increase: float = 0.0,
    seed: int = 0,
    slice_noise: float | None = None,
    slices: int | None = None,
) -> LatencyComparison | None:
    """Compare two versions' latencies from the same window (the same buckets): their P95s, and their
    ranks with the candidate's divided by ``1 + max_increase``.

    The noise comes from :data:`NOISE_SPLITS` random splits of the baseline's answers into two groups
    (a hypergeometric draw of the bucket counts): the spread of each statistic between the two
    groups, rescaled from the split's group sizes to the two versions' counts (the variance of both
    falls as ``1 / n``). That treats every answer as independent; where the step was cut into
    ``slices`` time slices whose P95 ratios spread more (``slice_noise``, the standard error of their
    mean: :mod:`conch.release.time_slices`), both tests' noise is widened by that factor. None when a
    version has no answer or the baseline too few to split.
    """
    if baseline.bounds != candidate.bounds:
        raise ValueError("the two histograms must have the same buckets")
    base = np.rint(np.asarray(baseline.counts, dtype=np.float64)).astype(np.int64)
    cand = np.rint(np.asarray(candidate.counts, dtype=np.float64)).astype(np.int64)
    n_base, n_cand = int(base.sum()), int(cand.sum())
    p95_base, p95_cand = quantile_of(baseline, base, 0.95), quantile_of(candidate, cand, 0.95)
    if not p95_base or not p95_cand or n_base < 2 * 10:
        return None
    at = _centres(baseline)
    rng = np.random.default_rng(seed)
    part = min(n_cand, n_base // 2)
    ratios, ranks = [], []
    for _ in range(NOISE_SPLITS):
        one = rng.multivariate_hypergeometric(base, part)
        first, second = quantile_of(baseline, one, 0.95), quantile_of(baseline, base - one, 0.95)
        if first and second:
            ratios.append(math.log(first / second))
            ranks.append(rank_statistic(at, base - one, at, one))
    if len(ratios) < NOISE_SPLITS // 2:
        return None
    scale = (1 / n_cand + 1 / n_base) / (1 / part + 1 / (n_base - part))
    noise = math.sqrt(float(np.var(ratios)) * scale)
    rank_noise = math.sqrt(float(np.var(ranks)) * scale)
    if slice_noise is not None and slice_noise > noise:
        rank_noise *= slice_noise / noise if noise > 0 else 1.0
        noise = slice_noise
    z = NormalDist().inv_cdf(1 - alpha / 2)
    excess = rank_statistic(at, base, at / (1 + max_increase), cand) - 0.5
    log_ratio = math.log(p95_cand / p95_base)
    return LatencyComparison(log_ratio, noise, z * noise, excess, z * rank_noise, slices)


@dataclass
class LatencyLooks:
    """The latency test's last look in a step and what it found; a new step starts a new one.

    A look's verdict holds until the next look, so the gate's ``failure_threshold`` counts looks here,
    not judgements: the check fails once ``needed`` looks in a row found the candidate slower
    (``beyond`` of them so far), and the first of them at least ``hold_s`` seconds ago
    (``slower_since``). A slow moment (a burst of load, the queue of a version whose share just rose)
    is then confirmed or cleared by later looks, with more answers and more time.
    """

    look: int = 0
    comparison: LatencyComparison | None = None
    verdict: str = Verdict.UNSURE
    needed: int = 1
    beyond: int = 0
    hold_s: float = 0.0
    slower_since: float | None = None


def latency_verdict(comparison: LatencyComparison, max_increase: float) -> str:
    """Beyond when even the low end of the P95 ratio is above ``1 + max_increase`` (the minimum effect
    size), or the candidate's latencies divided by it still rank above the baseline's; within when the
    high end of the P95 ratio is not above it."""
    limit = math.log1p(max_increase)
    slower = comparison.rank_excess - comparison.rank_bound > 0
    if comparison.log_ratio - comparison.bound > limit or slower:
        return Verdict.BEYOND
    if comparison.log_ratio + comparison.bound <= limit:
        return Verdict.WITHIN
    return Verdict.UNSURE


def look_alpha(alpha: float, look: int) -> float:
    """The share of ``alpha`` the ``look``-th latency look (from 1) spends: ``6 / (pi**2 * look**2)``."""
    return alpha * 6 / (math.pi**2 * look**2)


def latency_look(answers: float) -> int:
    """Which look a version's answer count has reached: 0 before :data:`FIRST_LATENCY_LOOK`, then 1,
    2, 3... at each doubling."""
    if answers < FIRST_LATENCY_LOOK:
        return 0
    return 1 + math.floor(math.log2(answers / FIRST_LATENCY_LOOK))
