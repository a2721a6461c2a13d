"""Upstream BookKeeper's metric names and shapes, derived at scrape time from bookiesim's own.

``rows`` (the row types), ``quantiles`` (summary quantiles from histogram buckets over a
rolling window), ``collector`` (the ``prometheus_client`` collector), ``bookie_names`` (the
bookie's table), ``docs`` (the mapping pages). Auto-recovery's table is
:mod:`bookiesim.autorecovery.upstream_metrics`. The page: ``docs/metrics.md``.
"""
