"""Auto-recovery's records against what upstream 4.17.4's auditor and worker wrote (vectors).

The vectors' ``zk/03``..``zk/06`` dumps and ``timeline-kill-bookie3.jsonl`` (README, "zk/")
record ``/ledgers/underreplication`` through a cluster's life: replication disabled and
enabled again, an auditor elected, a bookie killed, its ledgers marked, locked by a worker,
one re-replicated, then all healed. Three claims are checked:

1. every recorded node decodes to the fields the README states;
2. our encoders, given those fields, write the same bytes;
3. our manager, driven through the same events on a real ZooKeeper and on the embedded
   stores, leaves the same nodes — paths, persistent or ephemeral, bytes, versions — at
   each recorded moment, so that upstream's tools read our state and ours theirs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from bookiesim.metadata.store import join_path
from bookiesim.metadata.underreplication import LedgerLock, UnderReplicationManager
from bookiesim.metadata.underreplication_format import (
    decode_layout,
    decode_lock,
    decode_mark,
    decode_recovery_delay,
    decode_vote,
    encode_layout,
    encode_lock,
    encode_mark,
    encode_recovery_delay,
    encode_vote,
    ledger_id_of_mark,
    mark_path,
)
from tests.interop.vectors import upstream_dir
from tests.metadata.helpers import Backend, backend_for, opened

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.metadata import MetadataStore

BASE = "/ledgers/underreplication"
LOST = "127.0.0.1:34183"
"""The bookie killed in the recording; every mark names it."""
AUDITOR = "127.0.0.1:3181"
"""The autorecovery process's id: no bookiePort, so upstream's default 3181."""
WORKER = "localhost"
"""What upstream's worker writes into its locks: its host name."""
CTIMES = {0: 1795529350173, 1: 1795529350191, 2: 1795529350202, 3: 1795529350214}
"""Each ledger's mark time, as recorded (ms)."""
DUMPS = (
    "03-replication-disabled",
    "04-autorecovery-running",
    "05-bookie3-lost-marks",
    "06-healed-after-bookie4",
)


@dataclass(frozen=True)
class Node:
    data: bytes
    ephemeral: bool
    version: int


Tree = dict[str, Node]


# --- the recordings --------------------------------------------------------------------------


def recorded_dump(name: str) -> Tree:
    """The ``underreplication`` nodes of one dump (``zk/<name>/index.json``)."""
    dump = upstream_dir() / "zk" / name
    tree: Tree = {}
    for entry in json.loads((dump / "index.json").read_text()):
        if entry["path"] == BASE or entry["path"].startswith(BASE + "/"):
            data = (dump / entry["file"]).read_bytes()
            assert len(data) == entry["len"], entry
            tree[entry["path"]] = Node(data, entry["ephemeral"], entry["version"])
    assert tree, f"no {BASE} in {dump}"
    return tree


def recorded_timeline() -> list[tuple[float, Tree]]:
    """Each line of the timeline: its time and its ``underreplication`` nodes."""
    path = upstream_dir() / "zk" / "timeline-kill-bookie3.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        tree = {
            p: Node(bytes.fromhex(v[0]), v[1], v[2])
            for p, v in record["nodes"].items()
            if v is not None and (p == BASE or p.startswith(BASE + "/"))
        }
        lines.append((record["t"], tree))
    assert len(lines) >= 6, path
    return lines


def all_recorded() -> list[tuple[str, str, Node]]:
    """(where, path, node) of every recorded node, dumps and timeline alike."""
    found = [(dump, path, node) for dump in DUMPS for path, node in recorded_dump(dump).items()]
    for t, tree in recorded_timeline():
        found.extend((f"timeline t={t}", path, node) for path, node in tree.items())
    return found


# --- 1 and 2: each record decodes as the README says, and encodes back ---------------------


def test_every_recorded_node_decodes_and_encodes_back() -> None:
    kinds: set[str] = set()
    for where, path, node in all_recorded():
        rel = path.removeprefix(BASE)
        name = path.rsplit("/", 1)[1]
        context = f"{where}: {path}"
        if rel == "/LAYOUT":
            assert decode_layout(node.data, path) == ("BASIC", 1), context
            assert encode_layout() == node.data
            assert len(node.data) == 25
        elif rel.startswith("/ledgers/") and name.startswith("urL"):
            ledger_id = ledger_id_of_mark(name)
            assert ledger_id in CTIMES, context
            assert path == mark_path("/ledgers", ledger_id), context
            assert decode_mark(node.data, path) == ((LOST,), CTIMES[ledger_id]), context
            assert encode_mark([LOST], CTIMES[ledger_id]) == node.data
            assert len(node.data) == 48
        elif rel.startswith("/locks/"):
            ledger_id = ledger_id_of_mark(name)
            assert ledger_id in CTIMES, context
            assert node.ephemeral, context
            assert decode_lock(node.data, path) == WORKER
            assert encode_lock(WORKER) == node.data
        elif rel == "/auditorelection" or rel.startswith("/auditorelection/V_"):
            assert node.ephemeral == (rel != "/auditorelection"), context
            assert decode_vote(node.data, path) == AUDITOR
            assert encode_vote(AUDITOR) == node.data
        elif rel == "/lostBookieRecoveryDelay":
            assert decode_recovery_delay(node.data, path) == 0
            assert encode_recovery_delay(0) == node.data
        else:
            # The rest are empty persistent nodes: the base, its directories, the flag.
            assert rel in ("", "/ledgers", "/locks", "/disable") or rel.startswith("/ledgers/")
            assert node.data == b"", context
        if rel != "/auditorelection" and not rel.startswith(("/locks/", "/auditorelection/")):
            assert not node.ephemeral, context
        kinds.add(rel.split("/")[1] if rel else "")
        if rel.startswith("/ledgers/") and name.startswith("urL"):
            kinds.add("mark")
    assert kinds >= {"LAYOUT", "ledgers", "locks", "disable", "auditorelection", "mark"}
    assert "lostBookieRecoveryDelay" in kinds


# --- 3: the same events through our manager ----------------------------------------------------


@pytest.fixture(params=["zk", "sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend | None:
    return backend_for(request.param, request, tmp_path, session_timeout=5.0)


async def our_tree(store: MetadataStore) -> Tree:
    tree: Tree = {}

    async def visit(path: str) -> None:
        node = await store.get(path)
        if node is None:
            return
        tree[path] = Node(node.value, node.ephemeral_owner != 0, node.version)
        for name in await store.children(path):
            await visit(join_path(path, name))

    await visit(BASE)
    return tree


def same(ours: Tree, theirs: Tree, moment: str) -> None:
    missing = sorted(set(theirs) - set(ours))
    extra = sorted(set(ours) - set(theirs))
    assert (missing, extra) == ([], []), f"{moment}: nodes missing, extra"
    for path, node in theirs.items():
        assert ours[path] == node, f"{moment}: {path}: ours {ours[path]}, upstream's {node}"


async def lock(urm: UnderReplicationManager, ledger_id: int) -> LedgerLock:
    taken = await urm.try_lock(ledger_id, WORKER)
    assert taken is not None, ledger_id
    return taken


async def test_our_manager_writes_what_upstream_wrote(backend: Backend | None) -> None:
    async with opened(backend) as store:
        clock: list[int] = []
        urm = UnderReplicationManager(store, now_ms=lambda: clock[0])
        theirs = recorded_timeline()

        # zk/03: `autorecovery -disable`, then `-enable`.
        assert await urm.disable()
        same(await our_tree(store), recorded_dump("03-replication-disabled"), "zk/03")
        assert await urm.enable()

        # zk/04: the autorecovery process starts: elected, lostBookieRecoveryDelay=0.
        vote = await urm.volunteer(AUDITOR)
        assert await urm.elected(vote)
        assert await urm.initialize_lost_bookie_recovery_delay(0)
        same(await our_tree(store), recorded_dump("04-autorecovery-running"), "zk/04")
        same(await our_tree(store), theirs[0][1], f"timeline t={theirs[0][0]}")

        # 1.17 s after the kill: ledgers 0..3 marked; the worker locks ledger 0.
        for ledger_id, ctime in CTIMES.items():
            clock[:] = [ctime]
            await urm.mark_under_replicated(ledger_id, [LOST])
        lock0 = await lock(urm, 0)
        moment, tree = theirs[2]
        same(await our_tree(store), tree, f"timeline t={moment}")

        # ~6.5 s: ledger 2 (a spare existed) re-replicated. Upstream deletes the mark and
        # its directory before the lock, as we do; the poll caught it in between.
        assert await urm.mark_replicated(await lock(urm, 2))
        moment, tree = theirs[3]
        transient = f"{BASE}/locks/urL0000000002"
        assert transient in tree
        same(await our_tree(store), {p: n for p, n in tree.items() if p != transient}, "6.5 s")

        # Then ledgers 1 and 3 are locked and ledger 0's lock let go, as the worker moved on.
        lock1 = await lock(urm, 1)
        same(await our_tree(store), theirs[4][1], f"timeline t={theirs[4][0]}")
        await urm.release(lock0)
        same(await our_tree(store), theirs[5][1], f"timeline t={theirs[5][0]}")
        lock3 = await lock(urm, 3)
        same(await our_tree(store), theirs[6][1], f"timeline t={theirs[6][0]}")

        # zk/05: later, the worker holds ledger 0 again, and nothing else.
        await urm.release(lock1)
        await urm.release(lock3)
        held = await lock(urm, 0)
        same(await our_tree(store), recorded_dump("05-bookie3-lost-marks"), "zk/05")

        # zk/06: a fourth bookie joins; every mark goes, parents and locks with them.
        assert await urm.mark_replicated(held)
        for ledger_id in (1, 3):
            assert await urm.mark_replicated(await lock(urm, ledger_id))
        same(await our_tree(store), recorded_dump("06-healed-after-bookie4"), "zk/06")
