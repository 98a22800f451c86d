"""Shadow copies kept even between the two versions while both answer clients.

Why: in a shadow step each answer is copied to the other version, so the version that answers more
sends the other more copies. On a saturated server that feeds itself: the version that falls behind
gets more copies, answers its own clients later, and sends fewer back. Two identical versions at 50%
settled with one answering clients 1.9 times slower than the other at P95, for the whole step, and
the gate rightly rolled the slower one back. A version is therefore sent at most :data:`COPY_SLACK`
copies more than it sends in the step; the copies over that are skipped. Both versions then run the
same copies, and a difference in their clients' latency is their own.
"""

from __future__ import annotations

from collections import Counter

#: How many more copies one version may be sent than it sends, within a step: a batch or two.
COPY_SLACK = 16


class CopyBalance:
    """Copies sent to each version in the current step."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.sent: Counter[int] = Counter()

    def allow(self, step: int | None, answered: int, target: int) -> bool:
        """Whether a copy of an answer of ``answered`` may run on ``target`` now; counts it if so."""
        if step != self.step:
            self.step, self.sent = step, Counter()
        if self.sent[target] - self.sent[answered] >= COPY_SLACK:
            return False
        self.sent[target] += 1
        return True
