"""Storm control: the fires of a big instant spread over time under ``runledger_max_fires_per_second``.

Every fire of an instant is recorded in the ledger at once, as always (its ``scheduled_for`` unchanged); only
the publishing is spread. The outbox asks the pacer when each committed fire may go, earliest scheduled first,
and holds it until then. Fires go out in steps of PACE_STEP seconds, so beat wakes a few times per second rather
than once per fire, and no window of one second carries more than the cap. A later instant queues behind what
is still waiting: the cap holds across instants.
"""

from __future__ import annotations

import math

#: Seconds between the steps a paced burst goes out in (at least one fire per step).
PACE_STEP = 0.05


class Pacer:
    """Times at which fires may be published, at most ``rate`` per second (see the module docstring)."""

    def __init__(self, rate: float, step: float = PACE_STEP) -> None:
        self.rate = rate
        self.step = max(step, 1.0 / rate)
        self._next = -math.inf  # when the next fire could go, unrounded (local wall clock)
        self._base = 0.0        # the start of the burst under way: its steps are counted from it

    def times(self, instants: list[float]) -> list[float]:
        """For fires in publishing order, whose instants (local time) are ``instants``: when each may go."""
        out = []
        gap = 1.0 / self.rate
        for at in instants:
            if at >= self._next:  # nothing waits: a new burst starts at this fire's instant
                self._base = self._next = at
            steps = math.ceil((self._next - self._base) / self.step - 1e-9)
            out.append(self._base + steps * self.step)
            self._next += gap
        return out
