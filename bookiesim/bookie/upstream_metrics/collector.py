"""The collector that writes upstream's metric names and shapes, derived at scrape time.

Theory of operation
-------------------
:class:`UpstreamNamesCollector` is registered on the registry whose native metrics it reads
(a bookie's, or a standalone auto-recovery daemon's). At each scrape it collects that
registry's other collectors, then computes each row of its table (:mod:`.rows`) from the
native samples: counters and gauges are sums of native samples, summaries are built from a
native histogram (``_count`` and ``_sum`` from its totals, in upstream's unit; the quantiles
from the buckets of the last completed window, :mod:`.quantiles`). Nothing is recorded twice:
the add path updates only the native metrics, and all the work here happens per scrape.

A row is written only when every native family it reads is in the registry, so one table
serves a bookie with and without auto-recovery inside it.

Counters are typed ``unknown``: upstream's names have no ``_total``, and ``prometheus_client``'s
text encoder names a counter family ``<name>_total`` while OpenMetrics (what Prometheus asks
for by default) requires ``_total`` on a counter's samples; as ``unknown`` the sample is named
exactly as upstream's and PromQL (``rate()``, ``increase()``) treats it the same.

Collecting the registry from inside its own collection would recurse: while one collector of
this module collects a registry, every collector of this module on that registry yields
nothing (per thread).
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Final

from prometheus_client.metrics_core import Metric

from bookiesim.bookie.upstream_metrics.quantiles import (
    UPSTREAM_QUANTILES,
    RollingWindow,
    quantile,
    quantile_label,
)
from bookiesim.bookie.upstream_metrics.rows import Derived, UpstreamKind

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from prometheus_client import CollectorRegistry
    from prometheus_client.samples import Sample

__all__ = ["DEFAULT_ROLLOVER_SECONDS", "UpstreamNamesCollector", "histogram_buckets"]

DEFAULT_ROLLOVER_SECONDS: Final = 60.0
"""Upstream's ``prometheusStatsLatencyRolloverSeconds`` default."""

_TYPE_OF: Final = {
    UpstreamKind.COUNTER: "unknown",
    UpstreamKind.GAUGE: "gauge",
    UpstreamKind.SUMMARY: "summary",
}

_busy = threading.local()


def _collecting() -> set[int]:
    registries: set[int] | None = getattr(_busy, "registries", None)
    if registries is None:
        registries = _busy.registries = set()
    return registries


def _selected(sample: Sample, select: Iterable[tuple[str, str]]) -> bool:
    return all(sample.labels.get(k) == v for k, v in select)


def histogram_buckets(
    samples: Iterable[Sample], family: str
) -> tuple[tuple[float, ...], list[int], int, float]:
    """One histogram's finite bounds, per-bucket counts (``+Inf`` last), count and sum, from
    its ``_bucket``, ``_count`` and ``_sum`` samples (all one series, or several with the same
    bounds added up)."""
    cumulative: dict[float, float] = defaultdict(float)
    count = 0.0
    total = 0.0
    for s in samples:
        if s.name == f"{family}_bucket":
            cumulative[float(s.labels["le"])] += s.value
        elif s.name == f"{family}_count":
            count += s.value
        elif s.name == f"{family}_sum":
            total += s.value
    bounds = sorted(cumulative)
    per_bucket: list[int] = []
    below = 0.0
    for bound in bounds:
        per_bucket.append(round(cumulative[bound] - below))
        below = cumulative[bound]
    finite = tuple(b for b in bounds if not math.isinf(b))
    if len(per_bucket) == len(finite):  # no +Inf bucket seen: no series at all
        per_bucket.append(0)
    return finite, per_bucket, round(count), total


class UpstreamNamesCollector:
    """Upstream's names for the native metrics of ``registry``; see the module doc.

    ``rollover_seconds`` is upstream's ``prometheusStatsLatencyRolloverSeconds``; ``clock``
    is for tests.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        rows: Sequence[Derived],
        *,
        rollover_seconds: float = DEFAULT_ROLLOVER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(rollover_seconds) and rollover_seconds > 0):
            raise ValueError(f"rollover_seconds: expected > 0, got {rollover_seconds!r}")
        self._registry = registry
        self._rows = tuple(rows)
        self._period = rollover_seconds
        self._clock = clock
        self._started = clock()
        self._windows: dict[tuple[str, str], RollingWindow] = {}

    @classmethod
    def register(
        cls,
        registry: CollectorRegistry,
        rows: Sequence[Derived],
        *,
        rollover_seconds: float = DEFAULT_ROLLOVER_SECONDS,
    ) -> UpstreamNamesCollector:
        """Make one for ``registry`` and register it there."""
        collector = cls(registry, rows, rollover_seconds=rollover_seconds)
        registry.register(collector)
        return collector

    def describe(self) -> list[Metric]:
        # Names only (no samples): lets the registry refuse a clash with a native name, and
        # keeps registration from collecting.
        return [Metric(row.name, row.meaning, _TYPE_OF[row.kind]) for row in self._rows]

    def collect(self) -> Iterator[Metric]:
        busy = _collecting()
        key = id(self._registry)
        if key in busy:
            return
        busy.add(key)
        try:
            natives = {m.name: m for m in self._registry.collect()}
        finally:
            busy.discard(key)
        now = self._clock()
        for row in self._rows:
            if all(source in natives for source in row.sources):
                yield self._derive(row, natives, now)

    def _derive(self, row: Derived, natives: dict[str, Metric], now: float) -> Metric:
        metric = Metric(row.name, row.meaning, _TYPE_OF[row.kind])
        if row.kind is not UpstreamKind.SUMMARY:
            value = self._total(natives, row.source, row.select)
            metric.add_sample(row.name, dict(row.labels), value)
        elif row.totals:
            self._summary_totals(metric, row, natives)
        else:
            self._summary(metric, row, natives[row.source], now)
        return metric

    @staticmethod
    def _total(
        natives: dict[str, Metric], source: str, select: Iterable[tuple[str, str]] = ()
    ) -> float:
        values = (
            s.value
            for s in natives[source].samples
            if s.name in (source, f"{source}_total") and _selected(s, select)
        )
        return math.fsum(values)

    def _summary_totals(self, metric: Metric, row: Derived, natives: dict[str, Metric]) -> None:
        outcomes = [("true", row.source, row.select)]
        if row.failed_source is not None:
            outcomes.insert(0, ("false", row.failed_source, ()))
        for success, source, select in outcomes:
            labels = {"success": success, **dict(row.labels)}
            metric.add_sample(f"{row.name}_count", labels, self._total(natives, source, select))
            if row.sum_source is not None and success == "true":
                total = self._total(natives, row.sum_source) * row.scale
                metric.add_sample(f"{row.name}_sum", labels, total)

    def _summary(self, metric: Metric, row: Derived, native: Metric, now: float) -> None:
        groups: dict[str, list[Sample]] = {"false": [], "true": []}
        for s in native.samples:
            if not _selected(s, row.select):
                continue
            ok = row.success_label is None or s.labels.get(row.success_label) == row.success_value
            groups["true" if ok else "false"].append(s)
        outcomes = ("true",) if row.success_label is None else ("false", "true")
        for success in outcomes:
            bounds, per_bucket, count, total = histogram_buckets(groups[success], native.name)
            window = self._windows.get((row.name, success))
            if window is None:
                window = self._windows[(row.name, success)] = RollingWindow(
                    self._period, self._started
                )
            completed = window.advance(now, per_bucket)
            for q in UPSTREAM_QUANTILES:
                labels = {"success": success, "quantile": quantile_label(q), **dict(row.labels)}
                value = quantile(q, bounds, completed) * row.scale if bounds else math.nan
                metric.add_sample(row.name, labels, value)
            labels = {"success": success, **dict(row.labels)}
            metric.add_sample(f"{row.name}_count", labels, float(count))
            metric.add_sample(f"{row.name}_sum", labels, total * row.scale)
