"""Upstream's summary quantiles from bookiesim's histograms: the window and the interpolation.

Theory of operation
-------------------
Upstream's Prometheus provider keeps a DataSketches quantile sketch per OpStats and, every
``prometheusStatsLatencyRolloverSeconds`` (60 s by default), swaps it for an empty one: each
quantile it writes is of the events of the **last completed window**, while ``_count`` and
``_sum`` are totals since start. bookiesim's histograms are cumulative bucket counts, updated
on the add path anyway, so the window costs nothing there: :class:`RollingWindow` keeps the
bucket counts as they were when the current window opened, and when a scrape finds the window
over, the difference to now becomes the completed window's counts. Windows close at scrapes,
so a window lasts from one rollover to the first scrape at least the rollover period later
(with Prometheus scraping every 15 s and the default 60 s, 60 to 75 s).

:func:`quantile` reads a quantile from a window's bucket counts as Prometheus'
``histogram_quantile`` does: find the bucket holding rank ``q * n`` and interpolate linearly
inside it (the first bucket's lower bound is 0; a rank in the ``+Inf`` bucket answers the
highest finite bound). The true quantile lies in the same bucket as the answer, so the error
is at most the bucket's width: with the 1-2.5-5 latency buckets, a factor of 2.5 at worst and
much less when the events spread across the bucket. A window without events answers NaN, as
upstream's empty sketch does.

Sans-IO: the caller passes the clock's reading; nothing here reads a clock or a registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["UPSTREAM_QUANTILES", "RollingWindow", "quantile", "quantile_label"]

UPSTREAM_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
"""The quantiles upstream's ``PrometheusTextFormat.writeOpStat`` writes, in its order."""


def quantile_label(q: float) -> str:
    """The ``quantile`` label as upstream writes it (Java's ``Double.toString``: ``1.0``)."""
    return repr(float(q))


def quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float:
    """The ``q`` quantile of events counted per bucket.

    ``bounds`` are the finite upper bounds, ascending; ``counts`` holds one count per bound
    plus the ``+Inf`` bucket's, not cumulated. NaN when there are no events.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q!r} is outside 0 .. 1")
    if len(counts) != len(bounds) + 1:
        raise ValueError(f"{len(counts)} bucket counts for {len(bounds)} finite bounds (+Inf)")
    total = sum(counts)
    if total <= 0:
        return math.nan
    rank = q * total
    below = 0  # events in the buckets before this one
    for i, n in enumerate(counts):
        # The first non-empty bucket whose cumulative count reaches the rank holds it; empty
        # buckets are passed over so that q = 0 answers inside a bucket that has events.
        if n > 0 and below + n >= rank:
            if i == len(bounds):
                return bounds[-1] if bounds else math.nan
            lower = bounds[i - 1] if i > 0 else 0.0
            upper = bounds[i]
            return lower + (upper - lower) * max(0.0, rank - below) / n
        below += n
    raise AssertionError("unreachable: the last non-empty bucket reaches every rank")


@dataclass
class RollingWindow:
    """Per-bucket counts of the last completed window of one series (see the module doc).

    ``opened`` is when the current window began; :meth:`advance` is called at each scrape
    with the series' per-bucket counts since start and returns the counts of the last completed
    window (all zero until the first window completes).
    """

    period: float
    opened: float
    _at_open: list[int] = field(default_factory=list)
    _completed: list[int] = field(default_factory=list)

    def advance(self, now: float, cumulative: Sequence[int]) -> list[int]:
        if len(self._at_open) != len(cumulative):
            # First sight of the series (or of its buckets): it was empty when the window
            # opened, since a native series appears with its first event.
            self._at_open = [0] * len(cumulative)
            self._completed = [0] * len(cumulative)
        if now - self.opened >= self.period:
            self._completed = [
                max(0, c - o) for c, o in zip(cumulative, self._at_open, strict=True)
            ]
            self._at_open = list(cumulative)
            self.opened = now
        return self._completed
