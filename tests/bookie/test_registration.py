"""A bookie with a metadataServiceUri registers itself while it serves, advertising BP-32's
write-close (unless it acts as upstream), moves its registration under
``available/readonly`` when its disk fails, and its registration goes when it stops. The
registration is upstream's ``BookieServiceInfoFormat``, under the URI's ledgers root."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.errors import StorageFailedError
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import INSTANCEID, LAYOUT
from bookiesim.metadata.registration import bookie_address, live_bookies, read_only_bookies
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import DataFormats_pb2 as dfpb
from bookiesim.sim.disk import SimDisk

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.metadata.testing import ZooKeeperServer


async def test_bookie_registers_while_serving(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path, metadata_service_uri=uri)
    async with running_bookie(cfg) as svc, open_store(uri) as store:
        address = svc.address
        assert address is not None
        live = await live_bookies(store)
        info = live[address.bookie_id]
        assert info.port == address.bookie_port
        assert info.http_port == address.http_port
        assert info.supports_write_close
    async with open_store(uri) as store:
        assert await live_bookies(store) == {}


async def test_the_registration_is_upstreams_service_info(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path, metadata_service_uri=uri)
    async with running_bookie(cfg) as svc, open_store(uri) as store:
        address = svc.address
        assert address is not None
        node = await store.get(f"/ledgers/available/{address.bookie_id}")
        assert node is not None
        msg = dfpb.BookieServiceInfoFormat.FromString(node.value)
        # Our HTTP server is always on: upstream's "httpserver" endpoint (at httpServerHost),
        # then the bookie's.
        assert [(e.id, e.host, e.port, e.protocol) for e in msg.endpoints] == [
            ("httpserver", cfg.http_server_host, address.http_port, "http"),
            ("bookie", address.host, address.bookie_port, "bookie-rpc"),
        ]
        assert dict(msg.properties) == {
            "bookiesim.features": "writeClose",
            "bookiesim.pid": str(os.getpid()),
        }
        assert await bookie_address(store, address.bookie_id) == (
            address.host,
            address.bookie_port,
        )


async def test_a_bookie_registers_under_the_uris_ledgers_root(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    # Upstream's meaning of the URI: its path is the ledgers root, where the bookie makes the
    # cluster (LAYOUT, INSTANCEID) and registers; nothing goes to /ledgers below it.
    root = f"/bk-{uuid.uuid4().hex[:8]}/cluster-a"
    uri = zookeeper_server.uri(root)
    cfg = bookie_config(tmp_path, metadata_service_uri=uri)
    async with running_bookie(cfg) as svc, open_store(uri) as store:
        assert svc.address is not None
        assert store.ledgers_root == root
        assert list(await live_bookies(store)) == [svc.address.bookie_id]
        children = set(await store.children(root))
        assert {INSTANCEID, LAYOUT, "available", "cookies"} <= children
        assert "ledgers" not in children


async def test_upstream_behaviour_does_not_advertise_write_close(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path, metadata_service_uri=uri, upstream_behaviour=True)
    async with running_bookie(cfg) as svc, open_store(uri) as store:
        assert svc.address is not None
        live = await live_bookies(store)
        assert not live[svc.address.bookie_id].supports_write_close


@pytest.mark.parametrize("failing", ["journal", "ledgers"])
async def test_a_bookie_whose_disk_fails_registers_read_only(tmp_path: Path, failing: str) -> None:
    # As upstream: a bookie that takes no more adds leaves the writable list, so clients
    # stop choosing it for new ensembles; it stays registered, read-only, for its readers.
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path, metadata_service_uri=uri, flush_interval=3_600_000)
    disk = SimDisk()
    faults = {name: disk.add_root(tmp_path / name) for name in ("journal", "ledgers")}
    with disk.installed():
        async with (
            running_bookie(cfg) as svc,
            open_store(uri) as store,
            bookie_client(svc) as client,
        ):
            assert svc.address is not None
            me = svc.address.bookie_id
            assert list(await live_bookies(store)) == [me]
            assert (await client.add(1, 0, b"before")).status == pb.EOK
            faults[failing].sync_error = True
            if failing == "journal":
                assert (await client.add(1, 1, b"during")).status == pb.EIO
            else:
                with pytest.raises(StorageFailedError):
                    await svc.bookie.checkpoint()
            faults[failing].sync_error = False
            with trio.fail_after(10):
                await svc.bookie.wait_mode(read_only=True)
                # As upstream, the read-only node is created before the writable one is
                # deleted: for a moment the bookie is listed in both, so wait for the end state.
                while True:
                    if list(await read_only_bookies(store)) == [me] and not await live_bookies(
                        store
                    ):
                        break
                    await trio.sleep(0.02)
            # Upstream's answer to an add on a read-only bookie.
            assert (await client.add(1, 2, b"after")).status == pb.EREADONLY
            assert (await client.read(1, 0)).status == pb.EOK
