"""The rows of the ``entrylog`` source, without Spark: inputs, splits and Arrow batches.

Why: every Spark job stands on these rows; they must be exactly what the project's own
scanner sees (ids, locations, sizes), whatever the split size, with the LAC read from the
entry header, torn tails reported once and bad files named.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.entrylog.format import make_location
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.pipeline.inputs import (
    MIN_PARTITION_BYTES,
    InputError,
    Split,
    bookie_of,
    find_log_files,
    pack_splits,
    plan_splits,
)
from bookiesim.pipeline.rows import SCHEMA, read_split
from tests.entrylog.entries import scratch_dir
from tests.pipeline.logs import body, write_log


def rows(path_dir: Path, max_split: int, *, pulsar: bool = False) -> list[dict[str, object]]:
    files, _ = find_log_files([str(path_dir)])
    out: list[dict[str, object]] = []
    for split in plan_splits(files, max_split):
        for batch in read_split(split, problems=True, pulsar=pulsar):
            assert batch.schema == SCHEMA
            out += batch.to_pylist()
    return out


@settings(max_examples=40, deadline=None)
@given(
    ledgers=st.lists(st.tuples(st.integers(0, 5), st.integers(16, 3000)), min_size=0, max_size=60),
    max_split=st.integers(1, 20_000),
    with_map=st.booleans(),
    torn=st.sampled_from([b"", b"\x00\x00\x01\x00" + bytes(30)]),
)
def test_rows_equal_the_scanner_for_any_split_size(
    ledgers: list[tuple[int, int]], max_split: int, with_map: bool, torn: bytes
) -> None:
    with scratch_dir() as d:
        counters: dict[int, int] = {}
        bodies = []
        for ledger_id, size in ledgers:
            entry_id = counters.get(ledger_id, 0)
            counters[ledger_id] = entry_id + 1
            bodies.append(body(ledger_id, entry_id, size))
        path = write_log(d / "bk" / "ledgers", 7, bodies, ledgers_map=with_map, torn=torn)
        got = rows(d, max_split)
        with EntryLogReader(path, 7) as reader:
            scan = scan_entry_log(reader)
            expected = list(scan)
            torn_offset = scan.summary.torn_offset
    entries = [r for r in got if r["status"] == "entry"]
    assert [(r["ledgerId"], r["entryId"], r["location"], r["size"]) for r in entries] == [
        (s.ledger_id, s.entry_id, make_location(7, s.pos), s.size) for s in expected
    ]
    assert all(r["bookie"] == "bk" and r["logId"] == 7 for r in got)
    assert [r["lastAddConfirmed"] for r in entries] == [
        struct.unpack_from(">q", s.body or b"", 16)[0] for s in expected
    ]
    torn_rows = [r for r in got if r["status"] == "torn"]
    assert [r["location"] for r in torn_rows] == ([] if torn_offset is None else [torn_offset])


def test_bookie_names_come_from_the_layout() -> None:
    assert bookie_of(Path("/c/bookie-2/ledgers/current/1a.log")) == "bookie-2"
    assert bookie_of(Path("/var/bk/ledgers/current/0.log")) == "bk"
    assert bookie_of(Path("/copies/node7/3.log")) == "node7"


def test_a_bad_file_is_named_or_skipped(tmp_path: Path) -> None:
    good = write_log(tmp_path / "b1" / "ledgers", 1, [body(1, 0)])
    bad = good.parent / "2.log"
    bad.write_bytes(b"not an entry log" * 100)
    with pytest.raises(InputError, match=r"2\.log.*BKLO|2\.log.*magic"):
        find_log_files([str(tmp_path)])
    files, skipped = find_log_files([str(tmp_path)], skip_bad_files=True)
    assert [f.path for f in files] == [str(good)]
    assert [s.path for s in skipped] == [bad]
    with pytest.raises(InputError, match="no such file"):
        find_log_files([str(tmp_path / "missing")])


def test_big_logs_are_split_at_record_offsets(tmp_path: Path) -> None:
    write_log(tmp_path / "b" / "ledgers", 3, [body(1, e, 1000) for e in range(100)])
    files, _ = find_log_files([str(tmp_path)])
    splits = plan_splits(files, 10_000)
    assert len(splits) > 5
    assert splits[0].start == 1024
    assert splits[-1].stop is None
    assert [s.stop for s in splits[:-1]] == [s.start for s in splits[1:]]
    assert len([r for r in rows(tmp_path, 10_000) if r["status"] == "entry"]) == 100


def test_pulsar_fields_are_read_for_every_digest_type(tmp_path: Path) -> None:
    from bookiesim.client.digest import DigestManager, DigestType
    from bookiesim.proto.pulsar_entry import encode_pulsar_entry

    bodies = []
    for ledger_id, digest in enumerate(DigestType):
        manager = DigestManager(ledger_id, b"pw", digest)
        for e in range(3):
            payload = encode_pulsar_entry(
                b"m", publish_time=1000 + e, broker_timestamp=2000 + e, index=10 * ledger_id + e
            )
            bodies.append(manager.package(e, e - 1, e + 1, payload))
    bodies.append(body(9, 0))  # not Pulsar: nulls
    write_log(tmp_path / "b" / "ledgers", 1, bodies)
    got = [
        (r["ledgerId"], r["publishTime"], r["brokerTimestamp"], r["index"])
        for r in rows(tmp_path, 1 << 30, pulsar=True)
        if r["status"] == "entry"
    ]
    # HMAC needs the password to verify, DUMMY has no digest: both found by the magic.
    assert got == [
        (lid, 1000 + e, 2000 + e, 10 * lid + e) for lid in range(len(DigestType)) for e in range(3)
    ] + [(9, None, None, None)]


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.integers(0, 3),  # ledger: 0 and 1 use CRC32C, 2 and 3 CRC32
            st.one_of(
                st.integers(0, 10**12),  # a Pulsar entry published then
                st.binary(max_size=40),  # any other payload, Pulsar's first byte too
            ),
        ),
        max_size=80,
    )
)
def test_pulsar_fields_are_those_of_each_entry(entries: list[tuple[int, int | bytes]]) -> None:
    """Whatever mix a batch holds (Pulsar or not, payloads shorter than a magic, a leading
    0x0e that is no magic, two payload offsets), each row has its own entry's fields."""
    from bookiesim.client.digest import DigestManager, DigestType
    from bookiesim.proto.pulsar_entry import encode_pulsar_entry

    bodies, expected = [], []
    next_entry = [0] * 4
    for ledger_id, payload in entries:
        digest = DigestType.CRC32C if ledger_id < 2 else DigestType.CRC32
        e = next_entry[ledger_id]
        next_entry[ledger_id] += 1
        fields: tuple[int | None, ...] = (None, None, None)
        if isinstance(payload, int):
            fields = (payload, payload + 1, payload // 2)
            payload = encode_pulsar_entry(
                b"m", publish_time=fields[0], broker_timestamp=fields[1], index=fields[2]
            )
        bodies.append(DigestManager(ledger_id, b"", digest).package(e, e - 1, 0, payload))
        expected.append((ledger_id, e, *fields))
    with scratch_dir() as d:
        write_log(d / "b" / "ledgers", 1, bodies)
        got = [
            (r["ledgerId"], r["entryId"], r["publishTime"], r["brokerTimestamp"], r["index"])
            for r in rows(d, 1 << 30, pulsar=True)
            if r["status"] == "entry"
        ]
    assert got == expected


def test_splits_are_packed_into_balanced_tasks_in_order(tmp_path: Path) -> None:
    for log_id in range(40):
        write_log(tmp_path / "b" / "ledgers", log_id, [body(log_id, e, 3000) for e in range(100)])
    files, _ = find_log_files([str(tmp_path)])
    splits = plan_splits(files, 100_000)
    total = sum(s.nbytes for s in splits)
    assert total == sum(f.size for f in files)
    groups = pack_splits(splits, 4, 100_000_000)
    assert [s for g in groups for s in g] == splits  # every split once, in order
    # Small input: not spread thinner than MIN_PARTITION_BYTES a task.
    assert len(groups) == -(-total // MIN_PARTITION_BYTES) < 4
    assert len(pack_splits(splits, 1000)) <= total // MIN_PARTITION_BYTES + 1
    # Never more than max_bytes per task, however few tasks were asked for.
    capped = pack_splits(splits, 1, 1_000_000)
    assert all(sum(s.nbytes for s in g) <= 1_000_000 or len(g) == 1 for g in capped)
    assert len(capped) >= total // 1_000_000
    assert pack_splits([], 4) == []


def test_sixteen_equal_logs_make_four_tasks_of_four() -> None:
    # The benchmark's input (16 logs of a little over 128 MiB) on 2 cores: the byte counts
    # must not round a log into a fifth task.
    splits = [Split(f"{i:x}.log", "b", i, nbytes=(128 << 20) + 5000) for i in range(16)]
    groups = pack_splits(splits, 4)
    assert [len(g) for g in groups] == [4, 4, 4, 4]
    assert [len(g) for g in pack_splits(splits, 2)] == [5, 6, 5]  # two tasks would pass 1 GiB


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 1 << 31), max_size=60),
    partitions=st.integers(1, 40),
    max_bytes=st.integers(1, 1 << 32),
)
def test_packing_keeps_order_the_cap_and_the_balance(
    sizes: list[int], partitions: int, max_bytes: int
) -> None:
    splits = [Split(f"{i:x}.log", "b", i, nbytes=n) for i, n in enumerate(sizes)]
    groups = pack_splits(splits, partitions, max_bytes)
    assert [s for g in groups for s in g] == splits
    assert all(g for g in groups)
    held = [sum(s.nbytes for s in g) for g in groups]
    assert all(n <= max_bytes or len(g) == 1 for n, g in zip(held, groups, strict=True))
    total = sum(sizes)
    if total >= partitions * MIN_PARTITION_BYTES and total <= partitions * max_bytes:
        # As many tasks as asked (or one per split), none far from an equal share: at most
        # one split more than it.
        assert len(groups) <= min(partitions, len(splits)) or max_bytes < max(sizes)
        share = total / min(partitions, len(splits))
        assert all(n <= share + max(sizes) for n in held)
