"""Which bookies failed a ledger handle, and when the handle may try each of them again.

A writer replaces a failed bookie by one outside its ensemble. When every spare bookie has
failed it too, it reuses one of them (it may have been restarted) rather than give up; but
a bookie that refuses the connection or answers EIO fails again at once, and without a pause
the writer flips between such bookies, each flip a metadata write. The fault campaign saw
tens of thousands in a minute of virtual time. So a bookie that failed is reused only after
a backoff that doubles with each failure in a row and ends at the first add it acknowledges.

It does not retry forever: a bookie that keeps failing once its backoff has reached the maximum
is :meth:`~FailedBookies.exhausted` (:data:`STRIKES_AT_MAX`), and when every spare is, the
writer gives up with NotEnoughBookies as upstream's does when no bookie is left to choose.
Without that bound, a writer whose spares are all down but still registered (a stalled process
whose session has not yet expired) waited on its adds for ever.

No I/O and no clock of its own: callers pass the time (``trio.current_time()``), so the rule
is tested alone and holds in virtual time.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STRIKES_AT_MAX", "FailedBookies"]

STRIKES_AT_MAX = 5
"""Failures after waiting out the maximum backoff before a bookie is given up: with the
defaults (0.1 s doubling to 5 s) about 36 s of patience for a restart, then NotEnoughBookies."""


@dataclass
class _Strikes:
    in_a_row: int
    """Failures since the bookie last acknowledged an add (0: none since)."""
    last_failed_at: float


class FailedBookies:
    """Bookies that failed this handle: never chosen while others are available, and reused
    only once :meth:`due_at` has come."""

    def __init__(self, first_backoff: float, max_backoff: float) -> None:
        if not 0 <= first_backoff <= max_backoff:
            raise ValueError(
                f"need 0 <= first backoff <= max backoff, got {first_backoff} and {max_backoff}"
            )
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self._strikes: dict[str, _Strikes] = {}
        doublings = 0  # to reach the maximum, at most the 64 that backoff() counts
        while 0 < first_backoff * 2.0**doublings < max_backoff and doublings < 64:
            doublings += 1
        self.give_up_after = doublings + 1 + STRIKES_AT_MAX
        """Failures in a row after which a bookie is exhausted: enough to reach the maximum
        backoff, and :data:`STRIKES_AT_MAX` more after waiting it out."""

    def __contains__(self, bookie: object) -> bool:
        return bookie in self._strikes

    def failed(self, bookie: str, now: float) -> None:
        """``bookie`` failed a request of this handle at ``now``."""
        strikes = self._strikes.setdefault(bookie, _Strikes(0, now))
        strikes.in_a_row += 1
        strikes.last_failed_at = now

    def acknowledged(self, bookie: str) -> None:
        """``bookie`` stored an add: its next failure starts the backoff afresh. It stays a
        bookie that failed, the last to be chosen."""
        strikes = self._strikes.get(bookie)
        if strikes is not None:
            strikes.in_a_row = 0

    def backoff(self, bookie: str) -> float:
        """Seconds the handle waits after ``bookie``'s last failure before reusing it."""
        strikes = self._strikes.get(bookie)
        if strikes is None or strikes.in_a_row == 0:
            return 0.0
        # Capped before the power, so that a bookie failing for hours cannot overflow it.
        doublings = min(strikes.in_a_row - 1, 64)
        return min(self.max_backoff, self.first_backoff * 2.0**doublings)

    def due_at(self, bookie: str) -> float:
        """When ``bookie`` may be chosen again (minus infinity if it never failed)."""
        strikes = self._strikes.get(bookie)
        if strikes is None:
            return float("-inf")
        return strikes.last_failed_at + self.backoff(bookie)

    def exhausted(self, bookie: str) -> bool:
        """``bookie`` failed again after waiting out the maximum backoff: not worth waiting
        for any longer."""
        strikes = self._strikes.get(bookie)
        return strikes is not None and strikes.in_a_row >= self.give_up_after
