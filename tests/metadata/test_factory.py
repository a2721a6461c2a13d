"""``metadataServiceUri`` handling, and what is specific to each backend.

Why: a wrong URI is the first thing a user gets wrong, so every refusal must quote it; and
the few guarantees that only one backend has to provide (SQLite's WAL mode, busy timeouts,
relative paths; ZooKeeper's ledgers root, chroot option and unreachable servers) are checked
here rather than in the shared suite.
"""

from __future__ import annotations

import re
import socket
import sqlite3
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.metadata import (
    InvalidUriError,
    NodeExistsError,
    StoreUnavailableError,
    open_store,
    scheme_of,
)
from bookiesim.metadata.sqlite_store import SqliteStore, open_sqlite_store, sqlite_path_from_uri
from bookiesim.metadata.zk_store import ZkStore, parse_zk_uri

if TYPE_CHECKING:
    from bookiesim.metadata.testing import ZooKeeperServer


@pytest.mark.parametrize(
    ("uri", "scheme"),
    [
        ("sqlite:///tmp/meta.db", "sqlite"),
        ("sqlite:meta.db", "sqlite"),
        ("zk://127.0.0.1:2181/bk", "zk"),
        ("zk+hierarchical://zk1:2181;zk2:2181/ledgers", "zk"),
    ],
)
def test_scheme_of(uri: str, scheme: str) -> None:
    assert scheme_of(uri) == scheme


@pytest.mark.parametrize("uri", ["etcd://127.0.0.1:2379", "/tmp/meta.db", "mysql:x", ""])
async def test_unknown_uri_is_named(uri: str) -> None:
    with pytest.raises(InvalidUriError, match="metadataServiceUri") as info:
        async with open_store(uri):
            pass  # pragma: no cover
    if uri:
        assert repr(uri) in str(info.value)


def test_sqlite_paths(tmp_path: Path) -> None:
    assert sqlite_path_from_uri("sqlite:///var/lib/bk/meta.db") == Path("/var/lib/bk/meta.db")
    assert sqlite_path_from_uri("sqlite:/var/lib/bk/meta.db") == Path("/var/lib/bk/meta.db")
    assert sqlite_path_from_uri("sqlite:rel/meta.db", cwd=tmp_path) == tmp_path / "rel/meta.db"
    assert sqlite_path_from_uri("sqlite:///a%20b/m.db") == Path("/a b/m.db")
    for bad in ["sqlite://host/m.db", "sqlite:", "sqlite:///", "sqlite:///m.db?mode=ro"]:
        with pytest.raises(InvalidUriError, match=f"^{re.escape(repr(bad))}"):
            sqlite_path_from_uri(bad)


async def test_sqlite_relative_uri_uses_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_store("sqlite:meta.db") as store:
        await store.create("/x", b"1")
    assert (tmp_path / "meta.db").is_file()


async def test_sqlite_is_wal_and_survives_reopening(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    async with open_store(uri) as store:
        await store.create("/persist", b"kept")
        await store.create("/gone", b"", ephemeral=True)
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    async with open_store(uri) as store:
        node = await store.get("/persist")
        assert node is not None
        assert node.value == b"kept"
        assert await store.get("/gone") is None


async def test_sqlite_missing_directory_is_named(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'no' / 'such' / 'meta.db'}"
    with pytest.raises(StoreUnavailableError, match=f"^{uri}: directory .* does not exist"):
        async with open_store(uri):
            pass  # pragma: no cover


async def test_sqlite_busy_database_is_unavailable(tmp_path: Path) -> None:
    """A writer that holds the lock past the busy timeout: the operation fails cleanly,
    naming the path, and nothing is half-written."""
    db = tmp_path / "meta.db"
    async with open_sqlite_store(f"sqlite://{db}", busy_timeout=0.2) as store:
        blocker = sqlite3.connect(db, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailableError, match=r"^/busy: .*locked"):
                await store.create("/busy", b"")
            assert await store.get("/busy") is None  # readers are not blocked in WAL mode
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        await store.create("/busy", b"")


async def test_errors_from_the_block_are_not_wrapped(tmp_path: Path) -> None:
    """The store runs background tasks around the caller's block; a caller's exception must
    still come out as itself, not inside an ExceptionGroup."""

    async def create_twice() -> None:
        async with open_store(f"sqlite://{tmp_path / 'm.db'}") as store:
            await store.create("/a")
            await store.create("/a")

    with pytest.raises(NodeExistsError):
        await create_twice()


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    async with open_store(f"sqlite://{tmp_path / 'm.db'}") as store:
        assert isinstance(store, SqliteStore)
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(Exception, match="store is closed"):
            await store.get("/")


@pytest.mark.parametrize(
    ("uri", "hosts", "root"),
    [
        # Upstream's meaning (ZKMetadataDriverBase): the path is the ledgers root; without
        # one, URI.getPath() is "" and the cluster sits at the top of ZooKeeper's tree.
        ("zk://127.0.0.1:2181", "127.0.0.1:2181", "/"),
        ("zk://zk1", "zk1:2181", "/"),
        ("zk://zk1:2181,zk2:2182/bk/test/", "zk1:2181,zk2:2182", "/bk/test"),
        ("zk+hierarchical://zk1:2181;zk2:2181/ledgers", "zk1:2181,zk2:2181", "/ledgers"),
        ("zk+null://zk1:2181/ledgers", "zk1:2181", "/ledgers"),
        ("zk://[::1]:2181/", "[::1]:2181", "/"),
    ],
)
def test_zk_uris(uri: str, hosts: str, root: str) -> None:
    assert parse_zk_uri(uri) == (hosts, root)


@pytest.mark.parametrize(
    "uri", ["zk://", "zk://h:99999", "zk://h:1/a//b", "zk://h:1?x=1", "zk:/h:1", "zk://a b"]
)
def test_bad_zk_uris(uri: str) -> None:
    with pytest.raises(InvalidUriError, match=f"^{re.escape(repr(uri))}"):
        parse_zk_uri(uri)


async def test_zk_uri_path_is_the_ledgers_root_not_a_chroot(
    zookeeper_server: ZooKeeperServer,
) -> None:
    # Two clusters in one ZooKeeper, told apart by their roots; paths are ZooKeeper's own,
    # so the tree reads the same through upstream's tools. Opening creates nothing.
    base = f"/roots-{uuid.uuid4().hex[:8]}"
    async with (
        open_store(zookeeper_server.uri(f"{base}/one")) as one,
        open_store(zookeeper_server.uri(f"{base}/two")) as two,
    ):
        assert isinstance(one, ZkStore)
        assert (one.ledgers_root, two.ledgers_root) == (f"{base}/one", f"{base}/two")
        assert await one.get(base) is None
        await one.create(f"{one.ledgers_root}/LAYOUT", b"x", make_parents=True)
        node = await two.get(f"{base}/one/LAYOUT")
        assert node is not None
        assert node.value == b"x"
        assert await two.get(f"{two.ledgers_root}/LAYOUT") is None


async def test_zk_chroot_option_is_created_and_isolates(zookeeper_server: ZooKeeperServer) -> None:
    base = f"/iso-{uuid.uuid4().hex[:8]}"
    uri = zookeeper_server.uri("/ledgers")
    async with (
        open_store(uri, chroot=f"{base}/one") as one,
        open_store(uri, chroot=f"{base}/two") as two,
        open_store(zookeeper_server.uri()) as top,
    ):
        assert one.ledgers_root == "/ledgers"
        assert top.ledgers_root == "/"
        await one.create("/ledgers", b"1")
        assert await two.get("/ledgers") is None
        node = await top.get(f"{base}/one/ledgers")
        assert node is not None
        assert node.value == b"1"


async def test_zk_unreachable_server_is_named() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"zk://127.0.0.1:{port}/x"
    with trio.fail_after(20), pytest.raises(StoreUnavailableError, match=f"^{uri}: no ZooKeeper"):
        async with open_store(uri, connect_timeout=0.5):
            pass  # pragma: no cover
