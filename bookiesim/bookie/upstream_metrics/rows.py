"""The shape of one upstream metric and how it is derived from bookiesim's: the table's row type.

A :class:`Derived` row names an upstream metric exactly as upstream's Prometheus provider
writes it (scope and name joined by ``_``, e.g. ``bookkeeper_server_ADD_ENTRY_REQUEST``), its
type there, and the native series it is computed from. A :class:`NotExported` row names an
upstream metric bookiesim has no data for, and why. The bookie's table is
:mod:`bookiesim.bookie.upstream_metrics.bookie_names`; auto-recovery's is in
:mod:`bookiesim.autorecovery.upstream_metrics`.

Pure data; :mod:`bookiesim.bookie.upstream_metrics.collector` does the work.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Derived", "NotExported", "UpstreamKind"]


class UpstreamKind(enum.Enum):
    """How upstream's ``PrometheusTextFormat`` writes a metric."""

    COUNTER = "counter"
    """``# TYPE name counter`` and one sample named ``name`` (no ``_total``)."""
    GAUGE = "gauge"
    SUMMARY = "summary"
    """An OpStats: ``name{success,quantile}`` for upstream's quantiles, ``name_count`` and
    ``name_sum``, for ``success="true"`` and ``"false"``."""


@dataclass(frozen=True, slots=True)
class Derived:
    """One upstream metric and its derivation from native series.

    ``source`` is the native family as ``prometheus_client`` collects it (a counter without
    ``_total``). Counters and gauges sum the source's samples whose labels include
    ``select``. A summary reads a native histogram (its samples whose labels include
    ``select``); with ``success_label`` set, the samples whose label has ``success_value``
    make ``success="true"`` and the others ``success="false"``, else all are ``"true"``.
    ``scale`` converts the source's unit to upstream's (1000: seconds to milliseconds).

    A summary whose source is a counter (``totals``) has no quantiles: its ``_count`` is
    ``source`` (``success="true"``, its samples selected as above), ``failed_source``
    (``"false"``), and its ``_sum`` ``sum_source``, where given (all their samples).
    """

    name: str
    kind: UpstreamKind
    source: str
    meaning: str
    select: tuple[tuple[str, str], ...] = ()
    success_label: str | None = None
    success_value: str = ""
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()
    """Labels upstream adds to this metric, after ``success`` and ``quantile``."""
    totals: bool = False
    failed_source: str | None = None
    sum_source: str | None = None
    note: str = ""
    """How the derivation differs from upstream's measurement, for the docs."""

    @property
    def sources(self) -> tuple[str, ...]:
        """Every native family this row reads."""
        extra = (self.failed_source, self.sum_source)
        return (self.source, *(s for s in extra if s is not None))


@dataclass(frozen=True, slots=True)
class NotExported:
    """An upstream metric bookiesim does not export, and why."""

    name: str
    why: str
