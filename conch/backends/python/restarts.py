"""When a Python model's process dies: how long to wait before the next start, and when to give up.

The rule (pure, so it is tested with plain numbers):

- the first restart comes after :data:`FIRST_DELAY_S`, and each start that fails or a process that
  dies again soon doubles the wait, up to :data:`MAX_DELAY_S`;
- a process that served for :data:`STABLE_AFTER_S` or more counts as healthy again: its next death
  starts from the first delay;
- after :data:`GIVE_UP_AFTER` failed starts in a row (``initialize`` keeps raising, ``model.py`` no
  longer imports), the instance stays down and its version becomes UNAVAILABLE with the last error.

Measured on this machine: a bare model process starts and initializes in about 0.15 s, so a killed
instance serves again about half a second after its death.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_DELAY_S = 0.2
MAX_DELAY_S = 30.0
STABLE_AFTER_S = 30.0
GIVE_UP_AFTER = 5


@dataclass
class RestartPolicy:
    """The restart state of one instance."""

    failures_in_a_row: int = 0
    restarts: int = 0

    def delay_after_death(self, served_for_s: float) -> float:
        """Seconds to wait before restarting a process that died after serving ``served_for_s``."""
        if served_for_s >= STABLE_AFTER_S:
            self.failures_in_a_row = 0
        delay = min(FIRST_DELAY_S * 2**self.failures_in_a_row, MAX_DELAY_S)
        self.failures_in_a_row += 1
        return delay

    def start_failed(self) -> float | None:
        """Seconds before the next try after a failed start, or None: give up."""
        if self.failures_in_a_row >= GIVE_UP_AFTER:
            return None
        delay = min(FIRST_DELAY_S * 2**self.failures_in_a_row, MAX_DELAY_S)
        self.failures_in_a_row += 1
        return delay

    def started(self) -> None:
        self.restarts += 1
