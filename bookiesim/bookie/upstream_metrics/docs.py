"""The docs' sections on upstream's names: both directions of the mapping, from the tables.

``docs/metrics.md`` (the bookie) and ``docs/autorecovery-metrics.md`` are generated pages; each
appends :func:`mapping_sections` for its own table, so the mapping cannot drift from what the
collector exports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from bookiesim.bookie.upstream_metrics.quantiles import UPSTREAM_QUANTILES, quantile_label
from bookiesim.bookie.upstream_metrics.rows import Derived, NotExported, UpstreamKind

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["UPSTREAM_NAMES_INTRO", "mapping_sections"]

_QUANTILES: Final = ", ".join(quantile_label(q) for q in UPSTREAM_QUANTILES)

UPSTREAM_NAMES_INTRO: Final = f"""\
## Upstream's names and shapes

Dashboards and alerts written for upstream BookKeeper query the names its Prometheus provider
(`PrometheusMetricsProvider`) writes. Each bookie also serves those, on the same `/metrics`,
derived at scrape time from the native metrics above by a collector
(`bookiesim/bookie/upstream_metrics/`): the add path updates only the native metrics
(measured: `request()` 0.28 µs with and without the collector), and the derivation costs one
more pass over the registry per scrape and table (measured on this VM, 2026-11-28: `render()`
of a bookie's registry with auto-recovery inside and eight request series, 200 times: 2.0 ms
and 40 kB a scrape without the upstream names, 6.4 ms and 70 kB with).

- **Where and which key.** On the same `/metrics` as the native names, because that is where
  an upstream bookie with `httpServerEnabled=true` serves them too, so a scrape job written for
  upstream needs no change. On by default; `prometheusUpstreamNamesEnabled=false` (bookiesim's
  own key: upstream has no such switch, it only has its own names) leaves them out, for an
  operator who uses only bookiesim's names and does not want the extra series. Auto-recovery's
  (`replication_*`, in [autorecovery-metrics.md](autorecovery-metrics.md)) follow the same key,
  in the bookie's registry or the standalone daemon's.
- **Names and labels** as upstream writes them with `SortedLedgerStorage` or
  `InterleavedLedgerStorage`, `entryLogPerLedgerEnabled=true` and auto-recovery on: the
  scope joined to the stats name (`bookkeeper_server_ADD_ENTRY_REQUEST`,
  `bookie_journal_JOURNAL_SYNC`, `bookie_gc_THREAD_RUNTIME`, ...). The upstream names in the
  table of native metrics above are the DbLedgerStorage ones; the tables below are what is
  served.
- **Summaries** (upstream's OpStats) in upstream's units (milliseconds for latencies):
  `name{{success="true",quantile="0.5"}}` for the quantiles upstream writes ({_QUANTILES}),
  then `name_count` and `name_sum`, for `success="false"` and `"true"`. `_count` and `_sum` are
  totals since start (upstream's `_sum` adds each event's milliseconds cut to a whole number;
  here they are not cut). The quantiles are of the **last completed window** of
  `prometheusStatsLatencyRolloverSeconds` (upstream's key and default, 60 s): upstream swaps
  its sketches on a timer, bookiesim closes a window at the first scrape at least that long
  after the last one closed (with a 15 s scrape interval: windows of 60 to 75 s). A window
  without events reads `NaN`, as upstream's empty sketch does.
- **Quantiles from histogram buckets.** bookiesim's histograms are cumulative bucket counts;
  the window's counts are the difference between two scrapes' counts (nothing kept per
  event), and a quantile is interpolated linearly inside the bucket holding its rank, as
  Prometheus' `histogram_quantile` does (a rank in the `+Inf` bucket reads the highest finite
  bound). The true quantile is in the same bucket as the answer, so the error is at most the
  bucket's width: with the 1-2.5-5 latency buckets, the answer is within a factor of 2.5 of
  the true value, and usually much closer; `quantile="1.0"` reads the upper bound of the
  highest bucket that had an event. (Upstream's DataSketches sketch has a rank error of about
  1 %.) No sketch was needed: every summary upstream writes that bookiesim has data for
  has a native histogram behind it.
- **Counters** are written without `_total`, as upstream's, and typed `unknown`:
  `prometheus_client` names a counter's family `<name>_total` in the text format, and
  OpenMetrics (which Prometheus asks for by default) requires `_total` on a counter's samples.
  PromQL treats them alike (`rate()`, `increase()`). Upstream's counters that go up and down
  (`JOURNAL_QUEUE_SIZE`, `NUM_OF_WRITE_ACTIVE_LEDGERS`) are read from native gauges.
- **Thread labels.** Upstream's thread-scoped OpStats (`ADD_ENTRY`, `READ_ENTRY`) carry
  `threadPool` and `thread` labels; bookiesim serves requests on one event loop in no pool, so
  they carry the values upstream writes for a thread outside its registry: `"?"`.
- **Not exported** (below, with the reason): an upstream name bookiesim has no data for is
  left out rather than served as a constant 0.
"""


def _code(text: str) -> str:
    return f"`{text}`"


def _selector(source: str, select: Sequence[tuple[str, str]]) -> str:
    if not select:
        return _code(source)
    labels = ",".join(f'{k}="{v}"' for k, v in select)
    return _code(f"{source}{{{labels}}}")


def _derivation(row: Derived) -> str:
    source = _selector(row.source, row.select)
    scale = " in ms (times 1000)" if row.scale == 1000.0 else ""
    if row.kind is not UpstreamKind.SUMMARY:
        return f"{source} (sum of its series)"
    if row.totals:
        parts = [f'`_count{{success="true"}}` = {source}']
        if row.failed_source is not None:
            parts.append(f'`_count{{success="false"}}` = {_code(row.failed_source)}')
        if row.sum_source is not None:
            parts.append(f"`_sum` = {_code(row.sum_source)}{scale}")
        return "; ".join(parts)
    if row.success_label is None:
        split = 'all `success="true"`'
    else:
        split = (
            f'`{row.success_label}="{row.success_value}"` → `success="true"`, the others `"false"`'
        )
    return f"histogram {source}{scale}; {split}"


def _type(row: Derived) -> str:
    if row.kind is UpstreamKind.COUNTER:
        return "counter (typed unknown)"
    if row.kind is UpstreamKind.SUMMARY and row.totals:
        return "summary (count/sum)"
    return str(row.kind.value)


def mapping_sections(
    rows: Sequence[Derived],
    same_name: Sequence[str],
    not_exported: Sequence[NotExported],
    natives: Sequence[tuple[str, str]],
) -> list[str]:
    """Markdown lines: upstream -> bookiesim, the names not exported, bookiesim -> upstream.

    ``natives`` are the native metrics as (documented name, family name), in table order.
    """
    out = [
        "### From upstream's names to bookiesim's",
        "",
        "| upstream | type | derived from | differences |",
        "|---|---|---|---|",
    ]
    for row in rows:
        labels = ", ".join(f'`{k}="{v}"`' for k, v in row.labels)
        note = "; ".join(x for x in (row.note, f"labels {labels}" if labels else "") if x)
        out.append(f"| `{row.name}` | {_type(row)} | {_derivation(row)} | {note or '-'} |")
    out += [f"| `{name}` | gauge | the native metric of the same name | - |" for name in same_name]
    out += [
        "",
        "### Upstream's names not exported",
        "",
        "| upstream | why |",
        "|---|---|",
    ]
    out += [f"| `{item.name}` | {item.why} |" for item in not_exported]
    out += [
        "",
        "### From bookiesim's names to upstream's",
        "",
        "| bookiesim | upstream names derived from it |",
        "|---|---|",
    ]
    for documented, family in natives:
        derived = [row.name for row in rows if family in row.sources]
        derived += [name for name in same_name if name == family]
        names = ", ".join(_code(n) for n in derived) or "none"
        out.append(f"| `{documented}` | {names} |")
    return out
