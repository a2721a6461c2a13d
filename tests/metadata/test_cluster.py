"""The cluster under a ledgers root: created by bookies, required by clients, and the
previous version's data — adopted where it is, or refused with the URI to use instead.

Why these matter: an upstream bookie refuses a root without ``INSTANCEID`` and an upstream
client reads ``LAYOUT``, so every root we initialise must have both; and the meaning of the
URI's path changed (it was a chroot above ``/ledgers``, it is now the ledgers root), so an
old URI must fail with a line that says what to write, never start an empty cluster beside
the data.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.client import BookKeeper
from bookiesim.metadata import (
    FEATURE_WRITE_CLOSE,
    LedgerManager,
    MetadataStore,
    MovedLedgersRootError,
    NoClusterError,
    live_bookies,
    open_store,
)
from bookiesim.metadata.cluster import (
    INSTANCEID,
    LAYOUT,
    LAYOUT_HIERARCHICAL,
    ensure_cluster,
    instance_id,
    ledgers_root_of,
    refuse_previous_uri_form,
    require_cluster,
)
from bookiesim.metadata.ledger_paths import ledger_path
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.store import join_path

if TYPE_CHECKING:
    from bookiesim.metadata.testing import ZooKeeperServer
    from tests.metadata.helpers import Backend

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def _nodes(store: MetadataStore, path: str) -> dict[str, bytes]:
    """Every node below ``path``, by path relative to it."""
    out: dict[str, bytes] = {}
    for name in await store.children(path):
        child = join_path(path, name)
        node = await store.get(child)
        assert node is not None
        out[name] = node.value
        out.update({f"{name}/{k}": v for k, v in (await _nodes(store, child)).items()})
    return out


async def _previous_version_tree(store: MetadataStore, root: str) -> LedgerMetadata:
    """What the previous bookiesim left at ``root``: registrations as JSON, a ledger, the id
    generator — and no ``LAYOUT``, ``INSTANCEID`` or ``cookies``."""
    registration = {
        "bookieId": "127.0.0.1:3181",
        "features": ["writeClose"],
        "host": "127.0.0.1",
        "httpPort": None,
        "pid": 7,
        "port": 3181,
    }
    await store.create(
        join_path(root, "available/127.0.0.1:3181"),
        json.dumps(registration, sort_keys=True).encode(),
        make_parents=True,
    )
    await store.create(join_path(root, "idgen"), make_parents=True)
    metadata = LedgerMetadata(1, 1, 1, {0: ["127.0.0.1:3181"]}, password=b"pw")
    await store.create(ledger_path(3, root), metadata.to_bytes(), make_parents=True)
    return metadata


async def test_ensure_cluster_initialises_an_empty_root(store: MetadataStore) -> None:
    root = ledgers_root_of(store)
    assert root == store.ledgers_root == "/ledgers"
    assert await instance_id(store) is None
    first = await ensure_cluster(store)
    assert _UUID.fullmatch(first)
    tree = await _nodes(store, root)
    # Upstream's nodes after initnewcluster and a bookie's first start (vectors, zk/01).
    assert tree == {
        INSTANCEID: first.encode(),  # 36 bytes, no newline
        LAYOUT: LAYOUT_HIERARCHICAL,
        "available": b"",
        "available/readonly": b"",
        "cookies": b"",
    }
    assert await ensure_cluster(store) == first  # idempotent
    assert await require_cluster(store) == first
    assert await _nodes(store, root) == tree


async def test_racing_bookies_agree_on_one_instance_id(backend: Backend) -> None:
    ids: list[str] = []

    async def start(store: MetadataStore) -> None:
        ids.append(await ensure_cluster(store))

    async with backend.open() as one, backend.open() as two, trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(start, one)
            nursery.start_soon(start, two)
    assert len(ids) == 6
    assert len(set(ids)) == 1


async def test_a_client_on_an_empty_root_gets_one_line(store: MetadataStore) -> None:
    with pytest.raises(NoClusterError) as caught:
        await require_cluster(store)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"no BookKeeper cluster at {store.uri}: no INSTANCEID")
    assert "start a bookie there first, or check the path" in message
    # A LAYOUT alone (an upstream client may write one) is no cluster either.
    await store.create(
        join_path(store.ledgers_root, LAYOUT), LAYOUT_HIERARCHICAL, make_parents=True
    )
    with pytest.raises(NoClusterError):
        await require_cluster(store)
    assert await _nodes(store, store.ledgers_root) == {LAYOUT: LAYOUT_HIERARCHICAL}


async def test_previous_versions_root_is_adopted_where_it_is(
    store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    root = store.ledgers_root
    metadata = await _previous_version_tree(store, root)
    with caplog.at_level(logging.WARNING, logger="bookiesim.metadata.cluster"):
        cluster_id = await ensure_cluster(store)
    assert f"adopted the previous bookiesim cluster at {root}" in caplog.text
    node = await store.get(join_path(root, LAYOUT))
    assert node is not None
    assert node.value == LAYOUT_HIERARCHICAL
    assert await instance_id(store) == cluster_id
    # Its data is read as before: the old JSON registration with its feature, the ledger.
    live = await live_bookies(store)
    assert live["127.0.0.1:3181"].features == {FEATURE_WRITE_CLOSE}
    ledgers = LedgerManager(store)
    assert await ledgers.list_ledgers() == [3]
    assert (await ledgers.read(3))[0] == metadata


async def test_a_client_may_come_first_to_a_previous_versions_root(store: MetadataStore) -> None:
    await _previous_version_tree(store, store.ledgers_root)
    cluster_id = await require_cluster(store)
    assert await instance_id(store) == cluster_id
    assert await ensure_cluster(store) == cluster_id


async def test_previous_uri_form_is_refused_with_the_uri_to_use(
    zookeeper_server: ZooKeeperServer,
) -> None:
    # The previous version read zk://host/x as a chroot and kept the cluster at /x/ledgers.
    base = f"/prev-{uuid.uuid4().hex[:8]}"
    old_uri = zookeeper_server.uri(base)
    new_uri = zookeeper_server.uri(f"{base}/ledgers")
    async with open_store(old_uri) as store:
        assert store.ledgers_root == base
        await _previous_version_tree(store, f"{base}/ledgers")
        for attempt in (ensure_cluster, require_cluster, refuse_previous_uri_form):
            with pytest.raises(MovedLedgersRootError) as caught:
                await attempt(store)
            message = str(caught.value)
            assert "\n" not in message
            assert message == (
                f"{old_uri}: metadataServiceUri now names the ledgers root ({base}), and there "
                f"is no cluster there; the data of this cluster is at {base}/ledgers: "
                f"use {new_uri}"
            )
            assert caught.value.suggested == new_uri
            assert isinstance(caught.value, ValueError)  # an InvalidUriError
        assert await store.children(base) == ["ledgers"]  # nothing was started beside it
    with pytest.raises(MovedLedgersRootError):
        async with BookKeeper.open(old_uri):
            pass  # pragma: no cover
    async with open_store(new_uri) as store:
        cluster_id = await ensure_cluster(store)
        assert await require_cluster(store) == cluster_id
        assert list(await live_bookies(store)) == ["127.0.0.1:3181"]


async def test_no_path_means_zookeepers_root(zookeeper_server: ZooKeeperServer) -> None:
    # As upstream: a URI without a path puts the cluster at the top of the tree. The old
    # form of this URI (cluster at /ledgers) is recognised the same way as any other.
    base = f"/top-{uuid.uuid4().hex[:8]}"
    async with open_store(zookeeper_server.uri(), chroot=base) as store:
        assert store.ledgers_root == "/"
        await _previous_version_tree(store, "/ledgers")
        with pytest.raises(MovedLedgersRootError, match=r"use zk://[^ ]+:\d+/ledgers$"):
            await ensure_cluster(store)
    async with open_store(zookeeper_server.uri(), chroot=f"{base}-fresh") as store:
        cluster_id = await ensure_cluster(store)
        assert sorted(await store.children("/")) == [
            INSTANCEID,
            LAYOUT,
            "available",
            "cookies",
        ]
        assert await require_cluster(store) == cluster_id


async def test_memory_store_root_is_configurable() -> None:
    store = MemoryStore(ledgers_root="/bk/one")
    assert ledgers_root_of(store) == "/bk/one"
    await ensure_cluster(store)
    assert sorted(await store.children("/bk/one")) == [INSTANCEID, LAYOUT, "available", "cookies"]
    assert LedgerManager(store).root == "/bk/one"
