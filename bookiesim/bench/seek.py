"""``bookiesim bench seek``: seek by timestamp and index, and cursor-info codecs (issue 7).

**Seeks.** A topic of ``--entries`` entries over ``--ledgers`` ledgers (the last one open),
timestamps rising by 0 to 2 ms per entry, batch indexes (1 to 3 messages per entry), each
ledger closed a little after its last entry. It is held by
:class:`~bookiesim.mledger.memory_topic.MemoryTopic` — an in-memory ledger reader, *not* a
cluster: the seek code reads through the same ``EntrySource`` interface the managed ledger
implements, so entry reads are counted exactly, but wall times leave out bookie round
trips (each read here is a Pulsar entry encoded and parsed in memory). Per run, ``--seeks``
random targets are sought by timestamp with PIP-345 properties, with #22792 close-time
narrowing only (skew 60 s) and with a full binary search, and by index with properties and
with a full search; the figures are the largest and mean entries read per seek and the
mean wall time per seek.

**Codecs.** A cursor with ``--holes`` acknowledgement holes (random runs of 1 to 5 acked and
1 to 5 unacked entries over 50,000-entry ledgers) stored as ManagedCursorInfo: plain size and,
for each codec, size, encode and decode time.

Targets: with properties at most ⌈log2(entries per ledger)⌉ + 2 reads per seek (shown as
that bound over the largest count, ≥ 1); every codec's record at most 25% of plain (shown
as plain over compressed, ≥ 4).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
)
from bookiesim.mledger.compression import (
    CompressionType,
    MetadataCompressionConfig,
    decode_cursor_info,
    encode_cursor_info,
)
from bookiesim.mledger.cursor import acked_ranges
from bookiesim.mledger.memory_topic import MemoryLedger, MemoryTopic
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.mledger.seek import SeekOutcome, SeekStrategy, seek_by_index, seek_by_timestamp
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["build_topic", "cursor_with_holes", "register", "run_seek_benchmark"]

DEFAULTS = {"entries": 1_000_000, "ledgers": 20, "seeks": 200, "holes": 10_000}
SKEW_MS = 60_000
CODECS = [t for t in CompressionType if t is not CompressionType.NONE]
SEEKS = {
    "tsProps": ("by timestamp, properties", False, SeekStrategy.PROPERTIES),
    "tsClose": ("by timestamp, close time only", False, SeekStrategy.CLOSE_TIME),
    "tsFull": ("by timestamp, full search", False, SeekStrategy.FULL),
    "idxProps": ("by index, properties", True, SeekStrategy.PROPERTIES),
    "idxFull": ("by index, full search", True, SeekStrategy.FULL),
}


def build_topic(entries: int, ledgers: int, seed: int) -> MemoryTopic:
    rng = random.Random(seed)
    per_ledger = math.ceil(entries / ledgers)
    ts, index = 1_700_000_000_000, -1
    built = []
    for n in range(ledgers):
        count = min(per_ledger, entries - n * per_ledger)
        steps = rng.choices((0, 1, 2), k=count)
        batches = rng.choices((1, 2, 3), k=count)
        timestamps, indexes = array("q"), array("q")
        for step, batch in zip(steps, batches, strict=True):
            ts += step
            index += batch
            timestamps.append(ts)
            indexes.append(index)
        ledger = MemoryLedger(10 * n + 3, timestamps, indexes)
        if n < ledgers - 1:
            ledger.close_timestamp = ts + rng.randint(1, 500)
        built.append(ledger)
    return MemoryTopic(built)


def cursor_with_holes(holes: int, seed: int) -> ml_pb.ManagedCursorInfo:
    """A cursor whose acknowledged entries after its mark-delete leave ``holes`` gaps."""
    rng = random.Random(seed)
    ledger, entry = 1000, 0
    acked = []
    for _ in range(holes):
        entry += rng.randint(1, 5)  # the hole: unacknowledged entries
        for _ in range(rng.randint(1, 5)):
            acked.append(Position(ledger, entry))
            entry += 1
        if entry > 50_000:
            ledger, entry = ledger + 7, 0
    info = ml_pb.ManagedCursorInfo(
        cursorsLedgerId=-1, markDeleteLedgerId=1000, markDeleteEntryId=0, lastActive=1
    )
    for lower, upper in acked_ranges(acked):
        rng_msg = info.individualDeletedMessages.add()
        rng_msg.lowerEndpoint.ledgerId, rng_msg.lowerEndpoint.entryId = lower
        rng_msg.upperEndpoint.ledgerId, rng_msg.upperEndpoint.entryId = upper
    return info


def _figures() -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    for key, (label, _, _) in SEEKS.items():
        figures[f"{key}ReadsMax"] = Figure(f"{key}ReadsMax", f"seek {label}: reads, max", "reads")
        figures[f"{key}ReadsMean"] = Figure(
            f"{key}ReadsMean", f"seek {label}: reads, mean", "reads"
        )
        figures[f"{key}Ms"] = Figure(f"{key}Ms", f"seek {label}: time per seek", "ms")
    figures["tsCloseFallbacks"] = Figure(
        "tsCloseFallbacks", "seek by timestamp, close time: seeks it did not narrow", "seeks"
    )
    figures["readBound"] = Figure("readBound", "⌈log2(entries per ledger)⌉ + 2", "reads")
    figures["plainBytes"] = Figure("plainBytes", "cursor info, plain", "bytes")
    for codec in CODECS:
        name = codec.name
        figures[f"{name}Bytes"] = Figure(f"{name}Bytes", f"cursor info, {name}", "bytes")
        figures[f"{name}EncodeMs"] = Figure(f"{name}EncodeMs", f"{name} encode", "ms")
        figures[f"{name}DecodeMs"] = Figure(f"{name}DecodeMs", f"{name} decode", "ms")
    return figures


def _ratios() -> list[Ratio]:
    ratios = [
        Ratio(
            f"{key}Bound",
            f"read bound / max reads, {label}",
            "readBound",
            baseline=f"{key}ReadsMax",
            threshold=1.0 if strategy is SeekStrategy.PROPERTIES else None,
        )
        for key, (label, _, strategy) in SEEKS.items()
    ]
    ratios += [
        Ratio(
            f"{codec.name}Ratio",
            f"plain / {codec.name} size",
            "plainBytes",
            baseline=f"{codec.name}Bytes",
            threshold=4.0,
        )
        for codec in CODECS
    ]
    return ratios


async def _seek_all(
    ledgers: LedgerList,
    topic: MemoryTopic,
    targets: list[int],
    seek: Callable[[int], Awaitable[SeekOutcome]],
    expected: SeekStrategy,
) -> tuple[list[int], int, float]:
    """Entries read per seek, seeks that fell back to a full search, and seconds."""
    reads = []
    fallbacks = 0
    started = time.perf_counter()
    for target in targets:
        outcome = await seek(target)
        if outcome.strategy is not expected:
            # Close times narrow nothing for targets within the skew of every close time.
            if expected is not SeekStrategy.CLOSE_TIME:
                raise RuntimeError(f"asked for {expected.value}, the seek used {outcome.strategy}")
            fallbacks += 1
        reads.append(outcome.entries_read)
    return reads, fallbacks, time.perf_counter() - started


def _measure_seeks(
    topic: MemoryTopic, seeks: int, rng: random.Random, figures: dict[str, Figure]
) -> None:
    ledgers = topic.ledger_list()
    first, last = topic.ledgers[0], topic.ledgers[-1]
    ts_targets = [
        rng.randint(first.timestamps[0] - 10, last.timestamps[-1] + 10) for _ in range(seeks)
    ]
    idx_targets = [rng.randint(0, last.indexes[-1] + 3) for _ in range(seeks)]

    async def main() -> None:
        for key, (_, by_index, strategy) in SEEKS.items():

            async def seek(
                target: int, s: SeekStrategy = strategy, ix: bool = by_index
            ) -> SeekOutcome:
                if ix:
                    return await seek_by_index(ledgers, topic, target, strategy=s)
                return await seek_by_timestamp(
                    ledgers, topic, target, max_clock_skew_ms=SKEW_MS, strategy=s
                )

            targets = idx_targets if by_index else ts_targets
            reads, fallbacks, seconds = await _seek_all(ledgers, topic, targets, seek, strategy)
            if strategy is SeekStrategy.CLOSE_TIME:
                figures["tsCloseFallbacks"].runs.append(fallbacks)
            figures[f"{key}ReadsMax"].runs.append(max(reads))
            figures[f"{key}ReadsMean"].runs.append(round(sum(reads) / len(reads), 2))
            figures[f"{key}Ms"].runs.append(round(seconds / len(targets) * 1000, 4))

    trio.run(main)
    largest = max(len(ledger.timestamps) for ledger in topic.ledgers)
    figures["readBound"].runs.append(math.ceil(math.log2(largest)) + 2)


def _measure_codecs(info: ml_pb.ManagedCursorInfo, figures: dict[str, Figure]) -> None:
    figures["plainBytes"].runs.append(info.ByteSize())
    for codec in CODECS:
        config = MetadataCompressionConfig(codec, 0)
        started = time.perf_counter()
        data = encode_cursor_info(info, config)
        encoded = time.perf_counter()
        decoded, _ = decode_cursor_info(data)
        finished = time.perf_counter()
        if decoded != info:
            raise RuntimeError(f"{codec.name} did not round-trip the cursor info")
        figures[f"{codec.name}Bytes"].runs.append(len(data))
        figures[f"{codec.name}EncodeMs"].runs.append(round((encoded - started) * 1000, 3))
        figures[f"{codec.name}DecodeMs"].runs.append(round((finished - encoded) * 1000, 3))


def run_seek_benchmark(
    args: argparse.Namespace, status: Callable[[str], None]
) -> dict[str, Figure]:
    figures = _figures()
    status(f"building a topic of {args.entries:,} entries over {args.ledgers} ledgers")
    topic = build_topic(args.entries, args.ledgers, seed=1)
    info = cursor_with_holes(args.holes, seed=1)
    for run in range(1, args.repeats + 1):
        status(f"run {run}: seeks")
        _measure_seeks(topic, args.seeks, random.Random(run), figures)
        status(f"run {run}: codecs")
        _measure_codecs(info, figures)
    return figures


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "seek",
        help="entries read and time for seek by timestamp/index; cursor-info codec sizes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--entries", type=int, default=DEFAULTS["entries"], help="topic entries")
    parser.add_argument("--ledgers", type=int, default=DEFAULTS["ledgers"], help="ledgers")
    parser.add_argument("--seeks", type=int, default=DEFAULTS["seeks"], help="seeks per kind")
    parser.add_argument("--holes", type=int, default=DEFAULTS["holes"], help="cursor ack holes")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    for name in ("entries", "ledgers", "seeks", "holes", "repeats"):
        if getattr(args, name) <= 0:
            print(f"bench seek: --{name} must be positive", file=sys.stderr)
            return 2
    if args.entries < args.ledgers:
        print("bench seek: need at least one entry per ledger", file=sys.stderr)
        return 2
    bench = BenchRun.start("seek", args, {**DEFAULTS, "repeats": 3})
    machine = machine_info(Path.cwd())
    bench.status.print(f"bench seek ({describe_machine(machine)})", markup=False)
    figures = run_seek_benchmark(args, lambda text: bench.status.print(text, markup=False))
    settings: dict[str, object] = {
        "entries": args.entries,
        "ledgers": args.ledgers,
        "seeksPerKind": args.seeks,
        "ackHoles": args.holes,
        "repeats": args.repeats,
        "source": "in-memory ledger reader (MemoryTopic), not a cluster",
        "maxClockSkewMs": SKEW_MS,
    }
    return bench.finish(settings, figures, _ratios(), machine, as_json=args.json)
