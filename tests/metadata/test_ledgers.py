"""Ledger metadata: upstream's bytes, the life cycle table, and the manager on both backends.

The pure half (bytes, validation, transitions) needs no store: hypothesis drives it directly.
The manager half runs on SQLite and ZooKeeper through the ``backend``/``store`` fixtures, with
the races that matter — concurrent id allocation and concurrent metadata updates — run from
several tasks and several processes.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.metadata import (
    ALLOWED_TRANSITIONS,
    METADATA_HEADER,
    BadVersionError,
    CorruptMetadataError,
    DigestType,
    IllegalUpdateError,
    InvalidMetadataError,
    LedgerManager,
    LedgerMetadata,
    LedgerState,
    MetadataStore,
    NodeExistsError,
    NoSuchLedgerError,
    check_update,
    ledger_id_from_path,
    ledger_path,
)
from bookiesim.proto import DataFormats_pb2 as pb

if TYPE_CHECKING:
    from tests.metadata.helpers import Backend

INT64 = st.integers(-(2**63), 2**63 - 1)
BOOKIE_IDS = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,15}:[0-9]{1,5}", fullmatch=True)


@st.composite
def ledger_metadata(draw: st.DrawFn) -> LedgerMetadata:
    """Any valid LedgerMetadata: every state, digest, optional field and segment layout."""
    e = draw(st.integers(1, 7))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    keys = sorted(draw(st.sets(st.integers(0, 2**63 - 1), min_size=1, max_size=4)))
    ensembles = {k: draw(st.lists(BOOKIE_IDS, min_size=e, max_size=e, unique=True)) for k in keys}
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=e,
        write_quorum_size=qw,
        ack_quorum_size=qa,
        ensembles=ensembles,
        state=state,
        last_entry_id=draw(st.integers(-1, 2**63 - 1)) if closed else -1,
        length=draw(st.integers(0, 2**63 - 1)) if closed else 0,
        digest_type=draw(st.sampled_from(DigestType)),
        password=draw(st.binary(max_size=24)),
        ctime=draw(st.none() | INT64),
        custom_metadata=draw(
            st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=4)
        ),
        c_token=draw(INT64),
    )


def simple(**overrides: object) -> LedgerMetadata:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum_size": 2,
        "ack_quorum_size": 2,
        "ensembles": {0: ["b1:3181", "b2:3181", "b3:3181"]},
    }
    fields.update(overrides)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


# --- bytes ------------------------------------------------------------------------------


@given(ledger_metadata())
def test_round_trip_through_upstream_bytes(md: LedgerMetadata) -> None:
    data = md.to_bytes()
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert LedgerMetadata.from_bytes(data) == md
    assert LedgerMetadata.from_bytes(data).to_bytes() == data  # stable encoding


@given(ledger_metadata())
def test_bytes_are_a_delimited_ledger_metadata_format(md: LedgerMetadata) -> None:
    """Decode the body with nothing but the generated protobuf: the fields are where upstream
    reads them."""
    body = md.to_bytes()[len(METADATA_HEADER) :]
    size, shift, pos = 0, 0, 0
    while True:
        b = body[pos]
        pos += 1
        size |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    assert len(body) == pos + size
    fmt = pb.LedgerMetadataFormat.FromString(body[pos:])
    assert (fmt.ensembleSize, fmt.quorumSize, fmt.ackQuorumSize) == (
        md.ensemble_size,
        md.write_quorum_size,
        md.ack_quorum_size,
    )
    assert fmt.state == md.state.value
    assert (fmt.lastEntryId, fmt.length) == (md.last_entry_id, md.length)
    assert [(s.firstEntryId, tuple(s.ensembleMember)) for s in fmt.segment] == list(
        md.ensembles.items()
    )
    assert fmt.HasField("password")
    assert fmt.password == md.password
    assert fmt.digestType == md.digest_type.value
    assert fmt.HasField("ctime") == (md.ctime is not None)
    assert {e.key: e.value for e in fmt.customMetadata} == md.custom_metadata
    assert fmt.HasField("cToken")
    assert fmt.cToken == md.c_token


def test_hand_encoded_vector() -> None:
    """The smallest ledger, encoded by hand from the field table of reference §1.8."""
    md = LedgerMetadata(1, 1, 1, {0: ["b:1"]})
    body = bytes(
        [0x08, 0x01]  # 1 quorumSize = 1
        + [0x10, 0x01]  # 2 ensembleSize = 1
        + [0x18, 0x00]  # 3 length = 0
        + [0x20]
        + [0xFF] * 9
        + [0x01]  # 4 lastEntryId = -1 (ten-byte varint)
        + [0x28, 0x01]  # 5 state = OPEN
        + [0x32, 0x07, 0x0A, 0x03, *b"b:1", 0x10, 0x00]  # 6 segment {member "b:1", first 0}
        + [0x38, 0x03]  # 7 digestType = CRC32C
        + [0x42, 0x00]  # 8 password = b""
        + [0x48, 0x01]  # 9 ackQuorumSize = 1
        + [0x60, 0x00]  # 12 cToken = 0
    )
    expected = b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body
    assert md.to_bytes() == expected
    assert LedgerMetadata.from_bytes(expected) == md


def test_decoding_follows_upstream_defaults() -> None:
    """Upstream leaves out what it did not know; absent fields decode as its builder does."""
    fmt = pb.LedgerMetadataFormat(quorumSize=2, ensembleSize=3, length=99, lastEntryId=7)
    fmt.state = pb.LedgerMetadataFormat.OPEN
    fmt.segment.add(firstEntryId=0, ensembleMember=["a:1", "b:1", "c:1"])
    md = LedgerMetadata.from_proto(fmt)
    assert md.ack_quorum_size == 2  # no ackQuorumSize: the write quorum
    assert (md.last_entry_id, md.length) == (-1, 0)  # only a CLOSED ledger has them
    assert (md.digest_type, md.password) == (DigestType.CRC32C, b"")  # no password
    assert (md.ctime, md.c_token, dict(md.custom_metadata)) == (None, 0, {})
    fmt.state = pb.LedgerMetadataFormat.CLOSED
    assert LedgerMetadata.from_proto(fmt).closed(7, 99) == LedgerMetadata.from_proto(fmt)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not ledger metadata"),
        (b"garbage", "not ledger metadata"),
        (b"BookieMetadataFormatVersion\t2\nquorumSize: 2\n", "version 2 is not supported"),
        (b"BookieMetadataFormatVersion\t1\n2\n3\n0\n", "version 1 is not supported"),
        (b"BookieMetadataFormatVersion\tx\n", "no version"),
        (b"BookieMetadataFormatVersion\t3\n", "truncated"),
        (b"BookieMetadataFormatVersion\t3\n\x05ab", "truncated"),
        (b"BookieMetadataFormatVersion\t3\n\x02\x08\x01", "required fields"),
        (b"BookieMetadataFormatVersion\t3\n\x03\xff\xff\xff", "does not parse"),
    ],
)
def test_corrupt_bytes_are_reported(data: bytes, message: str) -> None:
    with pytest.raises(CorruptMetadataError, match=message):
        LedgerMetadata.from_bytes(data)


def test_out_of_order_segments_are_corrupt() -> None:
    md = simple(ensembles={0: ["a:1", "b:1", "c:1"], 5: ["a:1", "b:1", "d:1"]})
    fmt = md.to_proto()
    fmt.segment[0].firstEntryId = 9
    with pytest.raises(CorruptMetadataError, match="out of order"):
        LedgerMetadata.from_proto(fmt)


# --- validation and life cycle ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ensemble_size": 2}, "has 3 bookies"),
        ({"write_quorum_size": 4}, "ensemble size >= write quorum"),
        ({"ack_quorum_size": 3}, "write quorum >= ack quorum"),
        ({"ack_quorum_size": 0}, r"ack_quorum_size must be an integer in \[1,"),
        ({"ensembles": {}}, "at least one ensemble"),
        ({"ensembles": {0: ["a:1", "a:1", "b:1"]}}, "repeats a bookie"),
        ({"ensembles": {-1: ["a:1", "b:1", "c:1"]}}, "first entry id"),
        ({"ensembles": {0: ["a:1", "b 1", "c:1"]}}, "bad bookie id"),
        ({"last_entry_id": 5}, "OPEN ledger has lastEntryId -1 and length 0"),
        ({"state": LedgerState.IN_RECOVERY, "length": 1}, "IN_RECOVERY ledger"),
        ({"state": LedgerState.CLOSED, "last_entry_id": -2}, "last_entry_id"),
        ({"custom_metadata": {"k": "not bytes"}}, "custom metadata maps str to bytes"),
        ({"c_token": 2**63}, "c_token"),
    ],
)
def test_invalid_metadata_is_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidMetadataError, match=message):
        simple(**overrides)


LEGAL = {
    (LedgerState.OPEN, LedgerState.OPEN),
    (LedgerState.OPEN, LedgerState.IN_RECOVERY),
    (LedgerState.OPEN, LedgerState.CLOSED),
    (LedgerState.IN_RECOVERY, LedgerState.IN_RECOVERY),
    (LedgerState.IN_RECOVERY, LedgerState.CLOSED),
    (LedgerState.CLOSED, LedgerState.CLOSED),
}


def in_state(state: LedgerState) -> LedgerMetadata:
    md = simple()
    if state is LedgerState.IN_RECOVERY:
        return md.in_recovery()
    if state is LedgerState.CLOSED:
        return md.closed(9, 900)
    return md


def test_transition_table_is_forward_only() -> None:
    pairs = {(old, new) for old, targets in ALLOWED_TRANSITIONS.items() for new in targets}
    assert pairs == LEGAL


@pytest.mark.parametrize(("old", "new"), list(itertools.product(LedgerState, LedgerState)))
def test_state_transitions(old: LedgerState, new: LedgerState) -> None:
    before, after = in_state(old), in_state(new)
    if (old, new) in LEGAL:
        check_update(before, after)
    else:
        with pytest.raises(IllegalUpdateError, match=f"from {old.name} to {new.name}"):
            check_update(before, after)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda md: md.closed(8, 900), "CLOSED ledger keeps lastEntryId 9"),
        (lambda md: md.closed(9, 901), "CLOSED ledger keeps"),
        (lambda md: simple(write_quorum_size=3).closed(9, 900), "write_quorum_size cannot change"),
        (lambda md: simple(password=b"x").closed(9, 900), "password cannot change"),
        (lambda md: simple(ensembles={1: ["a:1", "b:1", "c:1"]}).closed(9, 900), "removed"),
    ],
)
def test_closed_ledgers_and_immutable_fields(change: object, message: str) -> None:
    closed = in_state(LedgerState.CLOSED)
    with pytest.raises(IllegalUpdateError, match=message):
        check_update(closed, change(closed))  # type: ignore[operator]


def test_ensemble_changes() -> None:
    md = simple()
    changed = md.with_ensemble(10, ["b1:3181", "b4:3181", "b3:3181"])
    check_update(md, changed)
    assert changed.ensemble_at(9) == ("b1:3181", "b2:3181", "b3:3181")
    assert changed.ensemble_at(10) == ("b1:3181", "b4:3181", "b3:3181")
    assert changed.last_ensemble == (10, ("b1:3181", "b4:3181", "b3:3181"))
    assert changed.bookies() == {"b1:3181", "b2:3181", "b3:3181", "b4:3181"}
    # Replacing the last segment in place (no entry was written to it) is allowed too...
    check_update(changed, changed.with_ensemble(10, ["b1:3181", "b5:3181", "b3:3181"]))
    # ...and re-replication may swap a bookie of a closed ledger.
    closed = changed.closed(20, 2000)
    check_update(closed, closed.with_ensemble(0, ["b6:3181", "b2:3181", "b3:3181"]))
    with pytest.raises(IllegalUpdateError, match="must start after the last one"):
        check_update(changed, changed.with_ensemble(5, ["b1:3181", "b2:3181", "b3:3181"]))


# --- paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (42, "/ledgers/00/0000/L0042"),
        (1234567890, "/ledgers/12/3456/L7890"),
        (2**31 - 2, "/ledgers/21/4748/L3646"),
        (2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),  # upstream's switch to long paths
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_hierarchical_paths(ledger_id: int, path: str) -> None:
    assert ledger_path(ledger_id, "/ledgers") == path
    assert ledger_id_from_path(path, "/ledgers") == ledger_id
    # Any root, the ZooKeeper root included (a zk:// URI without a path, as upstream).
    for root in ("/bk/cluster-a", "/"):
        under = ledger_path(ledger_id, root)
        assert under == root.rstrip("/") + path.removeprefix("/ledgers")
        assert ledger_id_from_path(under, root) == ledger_id


def test_not_a_ledger_path() -> None:
    with pytest.raises(ValueError, match="not a ledger path"):
        ledger_id_from_path("/ledgers/available/x", "/ledgers")
    with pytest.raises(ValueError, match="not a ledger path"):
        ledger_id_from_path("/other/00/0000/L0001", "/ledgers")
    with pytest.raises(InvalidMetadataError):
        ledger_path(-1, "/ledgers")


# --- the manager, on both backends ------------------------------------------------------


async def test_create_read_write_delete(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    md = simple(custom_metadata={"application": b"test"}, ctime=1_700_000_000_000)
    ledger_id = await ledgers.create(md)
    assert await ledgers.read(ledger_id) == (md, 0)
    node = await store.get(ledger_path(ledger_id, store.ledgers_root))
    assert node is not None
    assert node.value == md.to_bytes()

    closed = md.closed(99, 12345)
    assert await ledgers.write(ledger_id, closed, 0) == 1
    assert await ledgers.read(ledger_id) == (closed, 1)

    await ledgers.delete(ledger_id)
    with pytest.raises(NoSuchLedgerError, match=f"ledger {ledger_id} does not exist"):
        await ledgers.read(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await ledgers.delete(ledger_id)


async def test_write_detects_conflicts(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    ledger_id = await ledgers.create(simple())
    md, version = await ledgers.read(ledger_id)
    # Two writers read version 0; the first to write wins, the second learns it lost.
    await ledgers.write(ledger_id, md.with_ensemble(5, ["b1:3181", "b9:3181", "b3:3181"]), version)
    with pytest.raises(BadVersionError) as info:
        await ledgers.write(ledger_id, md.closed(4, 400), version)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert (await ledgers.read(ledger_id))[0].state is LedgerState.OPEN


async def test_write_refuses_illegal_transitions(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    ledger_id = await ledgers.create(simple())
    md, version = await ledgers.read(ledger_id)
    version = await ledgers.write(ledger_id, md.closed(3, 30), version)
    for illegal in (md, md.in_recovery()):  # CLOSED never goes back
        with pytest.raises(IllegalUpdateError, match="from CLOSED to"):
            await ledgers.write(ledger_id, illegal, version)
    with pytest.raises(IllegalUpdateError):
        await ledgers.update_with_retry(ledger_id, lambda current: md)
    assert await ledgers.read(ledger_id) == (md.closed(3, 30), version)


async def test_explicit_ids_and_listing(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    assert await ledgers.list_ledgers() == []
    big = 2**40 + 7
    assert await ledgers.create(simple(), ledger_id=big) == big
    assert await store.get("/ledgers/000/0001/0995/1162/L7783") is not None
    with pytest.raises(NodeExistsError):
        await ledgers.create(simple(), ledger_id=big)
    allocated = [await ledgers.create(simple()) for _ in range(3)]
    assert len(set(allocated)) == 3
    await store.create("/ledgers/LAYOUT", b"not a ledger")
    assert await ledgers.list_ledgers() == sorted([*allocated, big])


async def test_corrupt_node_names_the_path(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    await store.create(
        ledger_path(5, store.ledgers_root), b"BookieMetadataFormatVersion\t2\n", make_parents=True
    )
    with pytest.raises(CorruptMetadataError, match=r"^/ledgers/00/0000/L0005: .*version 2"):
        await ledgers.read(5)


async def test_update_with_retry_under_contention(backend: Backend, store: MetadataStore) -> None:
    """Tasks on two clients each append a segment at once; every update lands, none is lost
    — the pattern of concurrent ensemble changes, recovery and close."""
    ledgers = LedgerManager(store)
    ledger_id = await ledgers.create(simple())
    writers = 6

    def append_segment(md: LedgerMetadata) -> LedgerMetadata:
        first, bookies = md.last_ensemble
        return md.with_ensemble(first + 1, bookies)

    async with backend.open() as other, trio.open_nursery() as nursery:
        for i in range(writers):
            manager = ledgers if i % 2 else LedgerManager(other)
            nursery.start_soon(manager.update_with_retry, ledger_id, append_segment)
    md, version = await ledgers.read(ledger_id)
    assert list(md.ensembles) == list(range(writers + 1))
    assert version == writers

    # A function that finds nothing to do writes nothing.
    closed, v = await ledgers.update_with_retry(ledger_id, lambda m: m.closed(9, 90))
    assert v == writers + 1
    assert await ledgers.update_with_retry(
        ledger_id, lambda m: None if m.is_closed else m.closed(1, 1)
    ) == (closed, v)


async def test_ledger_ids_unique_across_tasks_and_processes(
    backend: Backend, store: MetadataStore
) -> None:
    ledgers = LedgerManager(store)
    ids: list[int] = []
    per_worker = 15

    async def in_process(manager: LedgerManager) -> None:
        for _ in range(per_worker):
            # Recorded as soon as allocated, while the other workers allocate too.
            ids.append(await manager.allocate_ledger_id())  # noqa: PERF401

    async def in_subprocess() -> None:
        ids.extend(json.loads(await backend.run_worker("allocate", str(per_worker))))

    async with backend.open() as other, trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(in_process, ledgers if i % 2 else LedgerManager(other))
        nursery.start_soon(in_subprocess)
        nursery.start_soon(in_subprocess)
    assert len(ids) == 6 * per_worker
    assert len(set(ids)) == len(ids)
    assert await store.children("/ledgers/idgen") == []  # id nodes are deleted at once
