"""What we write in ZooKeeper, against what upstream 4.17.4 wrote there (recorded vectors).

The vectors' ``zk/`` dumps (a three-bookie cluster through its life) and ``disk/zk-metadata``
hold every znode's exact bytes and whether it was ephemeral. An upstream client, bookie or
tool pointed at a root we wrote reads it only if each record is byte for byte what upstream
writes for the same values, and the tree has upstream's shape; so each kind of record is
checked here both ways (we decode theirs, we encode theirs again), and a bookiesim cluster's
tree is compared with the recorded one node by node.

Records owned elsewhere (cookies: ``tests/interop`` cookie checks; under-replication) are
not asserted here.
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import running_cluster, stable_port
from bookiesim.cluster.testing import bookie_config, running_bookie
from bookiesim.metadata import BookieInfo, LedgerMetadata, MetadataStore, open_store
from bookiesim.metadata.cluster import INSTANCEID, LAYOUT, LAYOUT_HIERARCHICAL
from bookiesim.metadata.ledgers import LedgerState
from bookiesim.metadata.store import join_path
from bookiesim.proto import DataFormats_pb2 as pb
from tests.interop.vectors import upstream_dir

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from bookiesim.metadata.testing import ZooKeeperServer

ROOT = "/ledgers"
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_REGISTRATION = re.compile(r"/ledgers/available/(?P<id>127\.0\.0\.1:\d+)")
_LEDGER = re.compile(r"/ledgers/\d{2}/\d{4}/L\d{4}")


@dataclass(frozen=True)
class Znode:
    path: str
    data: bytes
    ephemeral: bool
    version: int
    num_children: int


def _dumps() -> list[Path]:
    """Every recorded dump: the six moments of ``zk/`` and the disk recording's."""
    base = upstream_dir()
    dumps = sorted(p for p in (base / "zk").iterdir() if (p / "index.json").is_file())
    assert len(dumps) == 6, dumps
    return [*dumps, base / "disk" / "zk-metadata"]


def _znodes(dump: Path) -> Iterator[Znode]:
    for entry in json.loads((dump / "index.json").read_text()):
        data = (dump / entry["file"]).read_bytes()
        assert len(data) == entry["len"], entry
        yield Znode(
            entry["path"], data, entry["ephemeral"], entry["version"], entry["num_children"]
        )


def _all(pattern: re.Pattern[str]) -> list[Znode]:
    found = [z for dump in _dumps() for z in _znodes(dump) if pattern.fullmatch(z.path)]
    assert found, pattern
    return found


# --- (a) registrations ------------------------------------------------------------------


def test_registration_bytes_equal_upstreams() -> None:
    registrations = _all(_REGISTRATION)
    assert len(registrations) >= 3
    for znode in registrations:
        match = _REGISTRATION.fullmatch(znode.path)
        assert match is not None
        bookie_id = match["id"]
        host, port = bookie_id.split(":")
        assert znode.ephemeral
        assert len(znode.data) == 37
        # Given the recorded host and port, our encoder writes upstream's bytes...
        ours = BookieInfo(bookie_id, host=host, port=int(port))
        assert ours.to_service_info() == znode.data, znode.path
        # ... and our decoder reads upstream's: that address, no features.
        info = BookieInfo.from_registration(bookie_id, znode.data)
        assert info == ours
        assert (info.host, info.port, info.features, info.http_port) == (
            host,
            int(port),
            frozenset(),
            None,
        )
        assert not info.supports_write_close


def test_recorded_registration_files_resolve_through_their_endpoint() -> None:
    # The wire recording rewrote the bookie-rpc port so that upstream's client went through
    # a proxy: the id stays 127.0.0.1:33302, the address is the endpoint's.
    wire = upstream_dir() / "wire" / "registration"
    bookie_id = "127.0.0.1:33302"
    original = (wire / "available-127.0.0.1_33302.original.bin").read_bytes()
    rewritten = (wire / "available-127.0.0.1_33302.rewritten-to-proxy-33301.bin").read_bytes()
    assert BookieInfo.from_registration(bookie_id, original).port == 33302
    proxied = BookieInfo.from_registration(bookie_id, rewritten)
    assert (proxied.bookie_id, proxied.host, proxied.port) == (bookie_id, "127.0.0.1", 33301)
    assert BookieInfo(bookie_id, host="127.0.0.1", port=33301).to_service_info() == rewritten
    msg = pb.BookieServiceInfoFormat.FromString(original)
    assert [(e.id, e.protocol, list(e.auth), list(e.extensions)) for e in msg.endpoints] == [
        ("bookie", "bookie-rpc", [], [])
    ]
    assert not msg.properties


# --- (b) the cluster's identity ---------------------------------------------------------


def test_layout_and_instanceid_are_upstreams() -> None:
    for dump in _dumps():
        nodes = {z.path: z for z in _znodes(dump)}
        layout = nodes[f"{ROOT}/{LAYOUT}"]
        assert layout.data == LAYOUT_HIERARCHICAL, dump
        assert not layout.ephemeral
        instance = nodes[f"{ROOT}/{INSTANCEID}"]
        assert len(instance.data) == 36
        assert _UUID.fullmatch(instance.data), instance.data  # no newline
        assert not instance.ephemeral


# --- (c) ledger metadata ----------------------------------------------------------------


def test_every_recorded_ledger_decodes_and_encodes_byte_equal() -> None:
    ledgers = _all(_LEDGER)
    assert len(ledgers) == 23
    for znode in ledgers:
        metadata = LedgerMetadata.from_bytes(znode.data)
        assert metadata.to_bytes() == znode.data, znode.path
        assert not znode.ephemeral
        # What every recording's client wrote (vectors README): CRC32C, its password, no
        # ctime or custom metadata, 100-byte entries; lastEntryId and length once closed.
        assert metadata.digest_type.name == "CRC32C"
        assert metadata.password == b"bookiesim"
        assert metadata.ctime is None
        assert dict(metadata.custom_metadata) == {}
        if metadata.state is LedgerState.CLOSED:
            assert metadata.last_entry_id in (9, 19)
            assert metadata.length == (metadata.last_entry_id + 1) * 100
        else:
            assert (metadata.last_entry_id, metadata.length) == (-1, 0)


def test_recorded_ledgers_have_the_documented_fields() -> None:
    after = {
        z.path.rsplit("/", 1)[1]: (z, LedgerMetadata.from_bytes(z.data))
        for z in _znodes(upstream_dir() / "zk" / "02-after-4-ledgers")
        if _LEDGER.fullmatch(z.path)
    }
    quorums = {
        name: (m.ensemble_size, m.write_quorum_size, m.ack_quorum_size)
        for name, (_, m) in after.items()
    }
    assert quorums == {
        "L0000": (3, 3, 2),
        "L0001": (3, 2, 2),
        "L0002": (2, 2, 2),
        "L0003": (3, 3, 2),
    }
    for name in ("L0000", "L0001", "L0002"):
        znode, metadata = after[name]
        assert (znode.version, metadata.state, metadata.last_entry_id, metadata.length) == (
            1,
            LedgerState.CLOSED,
            9,
            1000,
        )
    znode, open_ledger = after["L0003"]
    assert (znode.version, open_ledger.state) == (0, LedgerState.OPEN)
    assert open_ledger.c_token != 0  # upstream's creator token, kept while OPEN
    assert dict(after["L0002"][1].ensembles) == {0: ("127.0.0.1:34183", "127.0.0.1:34182")}
    recovered = {
        z.path.rsplit("/", 1)[1]: LedgerMetadata.from_bytes(z.data)
        for z in _znodes(upstream_dir() / "zk" / "05-bookie3-lost-marks")
        if _LEDGER.fullmatch(z.path)
    }
    assert (recovered["L0003"].state, recovered["L0003"].last_entry_id) == (
        LedgerState.IN_RECOVERY,
        -1,
    )


# --- (d) the tree a bookiesim cluster writes ----------------------------------------------


def _shape(nodes: dict[str, bool], bookie_ids: list[str]) -> dict[str, bool]:
    """``path → ephemeral`` below the root, bookie ids replaced by ``B0``, ``B1``... in
    sorted order (upstream's ports are not ours)."""
    names = {bookie_id: f"B{i}" for i, bookie_id in enumerate(sorted(bookie_ids))}
    out: dict[str, bool] = {}
    for path, ephemeral in nodes.items():
        parts = [names.get(part, part) for part in path.split("/")]
        out["/".join(parts)] = ephemeral
    return out


def _recorded_shape(dump: str) -> dict[str, bool]:
    nodes = {
        z.path.removeprefix(ROOT).lstrip("/"): z.ephemeral
        for z in _znodes(upstream_dir() / "zk" / dump)
    }
    ids = [
        m["id"]
        for z in _znodes(upstream_dir() / "zk" / dump)
        if (m := _REGISTRATION.fullmatch(z.path))
    ]
    return _shape(nodes, ids)


async def _our_tree(store: MetadataStore, path: str, prefix: str = "") -> dict[str, bool]:
    out: dict[str, bool] = {}
    node = await store.get(path)
    assert node is not None
    out[prefix] = node.ephemeral_owner != 0
    for name in await store.children(path):
        child = f"{prefix}/{name}" if prefix else name
        out.update(await _our_tree(store, join_path(path, name), child))
    return out


def _without_cookies(shape: dict[str, bool], keep: bool) -> dict[str, bool]:
    """Cookies are the bookies' (written by bookie processes, checked by the disk
    conformance tests); the in-process cluster's bookies write none."""
    return {p: e for p, e in shape.items() if keep or not p.startswith("cookies/")}


async def test_a_bookiesim_cluster_writes_upstreams_tree(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    uri = zookeeper_server.uri(ROOT)
    chroot = f"/records-{uuid.uuid4().hex[:8]}"
    async with (
        open_store(uri, chroot=chroot) as store,
        running_cluster(tmp_path, 3, store=store) as cluster,
    ):
        ids = sorted(cluster.bookies)
        ours = _shape(await _our_tree(store, ROOT), ids)
        has_cookies = any(p.startswith("cookies/") for p in ours)
        assert _without_cookies(ours, has_cookies) == _without_cookies(
            _recorded_shape("01-after-init-3-bookies"), has_cookies
        )
        for bookie_id in ids:
            node = await store.get(f"{ROOT}/available/{bookie_id}")
            assert node is not None
            msg = pb.BookieServiceInfoFormat.FromString(node.value)
            rpc = [e for e in msg.endpoints if e.protocol == "bookie-rpc"]
            assert [(e.id, e.host, e.port) for e in rpc] == [
                ("bookie", "127.0.0.1", int(bookie_id.rsplit(":", 1)[1]))
            ]
        layout = await store.get(f"{ROOT}/{LAYOUT}")
        assert layout is not None
        assert layout.value == LAYOUT_HIERARCHICAL
        instance = await store.get(f"{ROOT}/{INSTANCEID}")
        assert instance is not None
        assert _UUID.fullmatch(instance.value)

        # Then the client step of zk/02: three closed ledgers and one left open.
        async with BookKeeper(store) as bk:
            for ensemble, write, ack in ((3, 3, 2), (3, 2, 2), (2, 2, 2), (3, 3, 2)):
                lh = await bk.create_ledger(ensemble, write, ack, password=b"bookiesim")
                for _ in range(10):
                    await lh.add_entry(bytes(100))
                if lh.ledger_id < 3:
                    await lh.close()
            versions = {n: (await store.get(f"{ROOT}/00/0000/L000{n}")) for n in range(4)}
        ours = _shape(await _our_tree(store, ROOT), ids)
        assert _without_cookies(ours, has_cookies) == _without_cookies(
            _recorded_shape("02-after-4-ledgers"), has_cookies
        )
        assert await store.children(f"{ROOT}/idgen") == []  # as recorded: ids nodes deleted
        recorded = {
            z.path.rsplit("/", 1)[1]: z.version
            for z in _znodes(upstream_dir() / "zk" / "02-after-4-ledgers")
            if _LEDGER.fullmatch(z.path)
        }
        assert {f"L000{n}": v.version for n, v in versions.items() if v is not None} == recorded


async def test_bookie_processes_write_upstreams_tree_with_cookies(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    # The same first moment with bookies as `bookiesim bookie` runs them: each opens the URI
    # itself, makes the cluster, stamps its cookie and registers (docs/bookie.md). Here the
    # cookies are compared too: persistent, one per bookie, beside the registrations.
    root = f"/records-{uuid.uuid4().hex[:8]}/ledgers"
    uri = zookeeper_server.uri(root)
    async with AsyncExitStack() as stack:
        ids = []
        for n in range(3):
            # A fixed port: the bookie id, which the store's cookie is named by, is known
            # before the bookie binds (as with upstream's bookiePort).
            cfg = bookie_config(
                tmp_path / f"b{n}", metadata_service_uri=uri, bookie_port=stable_port()
            )
            service = await stack.enter_async_context(running_bookie(cfg))
            assert service.address is not None
            ids.append(service.address.bookie_id)
        store = await stack.enter_async_context(open_store(uri))
        tree = await _our_tree(store, root)
    assert _shape(tree, ids) == _recorded_shape("01-after-init-3-bookies")
