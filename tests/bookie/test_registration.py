"""A bookie with a metadataServiceUri registers itself while it serves, advertising BP-32's
write-close (unless it acts as upstream), and its registration goes when it stops."""

from __future__ import annotations

from pathlib import Path

from bookiesim.metadata import open_store
from bookiesim.metadata.registration import live_bookies
from bookiesim.testing import bookie_config, running_bookie


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


async def test_upstream_behaviour_does_not_advertise_write_close(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path, metadata_service_uri=uri, upstream_behaviour=True)
    async with running_bookie(cfg) as svc, open_store(uri) as store:
        assert svc.address is not None
        live = await live_bookies(store)
        assert not live[svc.address.bookie_id].supports_write_close
