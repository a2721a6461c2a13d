"""What a caller reads from running bookie processes: their admin API
(``/api/v1/bookie/info``) and ``/metrics``, and the wait for a checkpoint. Used by the demo's
acts (:mod:`bookiesim.cli.demo`, :mod:`bookiesim.cli.demo_heal`) and ``bench recovery``;
every failure is one :class:`ClusterError` naming the bookie and the URL.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from bookiesim.cluster.processes import ClusterError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bookiesim.cluster.processes import LocalBookie

__all__ = [
    "Samples",
    "Snapshot",
    "bookie_info",
    "bookie_metrics",
    "checkpoints",
    "metric_by_label",
    "reasons",
    "snapshot",
    "wait_for_checkpoint",
    "wait_for_fresh_checkpoint",
]

HTTP_TIMEOUT = 5.0
CHECKPOINT_TIMEOUT = 15.0
"""Seconds to wait for a checkpoint: upstream's flushInterval (10 s) and some slack; the
demo's is 1 s."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def http_get(bookie: LocalBookie, url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            body: bytes = response.read()
            return body
    except (OSError, urllib.error.URLError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ClusterError(f"{bookie.name} ({bookie.describe()}): GET {url}: {reason}") from exc


def bookie_info(bookie: LocalBookie) -> dict[str, Any]:
    body = http_get(bookie, bookie.info_url)
    try:
        info: dict[str, Any] = json.loads(body)
    except ValueError as exc:
        raise ClusterError(f"{bookie.name}: {bookie.info_url} is not JSON: {body[:200]!r}") from exc
    return info


def bookie_metrics(bookie: LocalBookie) -> Samples:
    """Samples of ``/metrics`` by (name, sorted labels)."""
    text = http_get(bookie, bookie.metrics_url).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metric_by_label(samples: Samples, name: str, label: str) -> dict[str, int]:
    return {
        dict(labels)[label]: int(value)
        for (sample_name, labels), value in samples.items()
        if sample_name == name and label in dict(labels)
    }


def checkpoints(bookie: LocalBookie) -> int:
    return int(bookie_metrics(bookie).get(("bookie_checkpoints_total", ()), 0))


def wait_for_checkpoint(
    bookies: Sequence[LocalBookie], before: dict[str, int], flush_interval_ms: int = 1000
) -> None:
    """Until every bookie completed a checkpoint after ``before`` and has no rotated log left."""
    deadline = time.monotonic() + CHECKPOINT_TIMEOUT
    pending = list(bookies)
    while pending:
        pending = [
            b
            for b in pending
            if checkpoints(b) <= before[b.name] or bookie_info(b)["rotatedLogs"] != 0
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(b.name for b in pending)
            raise ClusterError(
                f"no checkpoint flushed the rotated logs of {names} within "
                f"{CHECKPOINT_TIMEOUT:.0f} s (flushInterval is {flush_interval_ms} ms)"
            )
        time.sleep(0.1)


def wait_for_fresh_checkpoint(
    bookies: Sequence[LocalBookie], flush_interval_ms: int = 1000
) -> None:
    """Until every bookie completed a checkpoint that *began* after this call, so that what it
    held in memory at the call (the sorted storage's table) is in its entry logs, and has no
    rotated log left. The count read now may miss a checkpoint already under way, which took
    its table before the call: the one after it is waited for."""
    under_way = {b.name: checkpoints(b) + 1 for b in bookies}
    wait_for_checkpoint(bookies, under_way, flush_interval_ms)


@dataclass
class Snapshot:
    info: dict[str, Any]
    metrics: Samples


def snapshot(bookie: LocalBookie) -> Snapshot:
    return Snapshot(bookie_info(bookie), bookie_metrics(bookie))


def reasons(counts: dict[str, int]) -> str:
    """``a=1, b=2`` for the non-zero counts, sorted; ``none`` without any."""
    shown = {k: v for k, v in counts.items() if v}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "none"
