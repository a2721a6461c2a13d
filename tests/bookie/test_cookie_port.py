"""``bookiePort=0`` and cookies: a cookie names the id its bookie registers with, in the
directories and in the store (SQLite and ZooKeeper), and a bookie that has one comes back
under that id — or refuses in one line when its port is taken."""

from __future__ import annotations

import socket
import uuid
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie import exit_codes
from bookiesim.bookie.cookie_check import (
    CookieError,
    cookie_dirs,
    read_dir_cookie,
    write_dir_cookie,
)
from bookiesim.bookie.process import BookieService
from bookiesim.cli.shell.cookies import UpdateRefusedError, update_cookies
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.metadata import open_store
from bookiesim.metadata.registration import live_bookies
from tests.cli.test_errors import bookie as bookie_process

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.metadata.store import MetadataStore
    from bookiesim.metadata.testing import ZooKeeperServer


async def serve_once(cfg: BookieConfig) -> str:
    """Run the bookie, write an entry, stop; the id it registered (or served) as."""
    async with running_bookie(cfg) as svc, bookie_client(svc) as client:
        assert svc.address is not None
        assert (await client.add(1, 0, b"x")).status == 0
        if cfg.metadata_service_uri:
            assert svc.address.bookie_id in await _registered(cfg.metadata_service_uri)
        return svc.address.bookie_id


async def _registered(uri: str) -> set[str]:
    async with open_store(uri) as store:
        return set(await live_bookies(store))


async def store_cookie(store: MetadataStore, bookie_id: str) -> bytes | None:
    node = await store.get(f"{store.ledgers_root}/cookies/{bookie_id}")
    return None if node is None else node.value


async def check_cookies_name_the_registered_id(uri: str, cfg: BookieConfig) -> None:
    first = await serve_once(cfg)
    assert not first.endswith(":0")
    dir_cookies = {(d / "VERSION").read_bytes() for d in cookie_dirs(cfg)}
    assert len(dir_cookies) == 1
    (dir_cookie,) = dir_cookies
    assert f'bookieHost: "{first}"'.encode() in dir_cookie
    async with open_store(uri) as store:
        assert await store_cookie(store, first) == dir_cookie
        assert await store.children(f"{store.ledgers_root}/cookies") == [first]
    # Started again with bookiePort=0, it binds the port its cookie names: the same bookie.
    assert await serve_once(cfg) == first


async def test_sqlite_store_cookie_names_the_registered_id(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri)
    await check_cookies_name_the_registered_id(uri, cfg)


async def test_zookeeper_store_cookie_names_the_registered_id(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    uri = zookeeper_server.uri(f"/cookie-port-{uuid.uuid4().hex[:8]}")
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri)
    await check_cookies_name_the_registered_id(uri, cfg)


async def test_without_a_store_a_restart_binds_the_cookies_port(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path)
    first = await serve_once(cfg)
    assert await serve_once(cfg) == first


async def test_a_taken_cookie_port_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path)
    first = await serve_once(cfg)
    port = int(first.rpartition(":")[2])
    last_mark = (tmp_path / "ledgers/current/lastMark").stat()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(CookieError) as caught:
            await BookieService(cfg).run()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot listen on 127.0.0.1:{port}, the port of bookie {first}")
    # Refused before the storage opened: no checkpoint rewrote the journal's mark.
    assert (tmp_path / "ledgers/current/lastMark").stat().st_mtime_ns == last_mark.st_mtime_ns


def test_a_taken_cookie_port_exits_with_the_cookie_code(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path)
    first = trio.run(serve_once, cfg)
    port = int(first.rpartition(":")[2])
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        proc = bookie_process(tmp_path)
    assert proc.returncode == exit_codes.INVALID_COOKIE
    assert proc.stdout == ""
    refused = [line for line in proc.stderr.splitlines() if "refusing to start" in line]
    assert len(refused) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in refused[0]
    assert "Traceback" not in proc.stderr


async def test_a_port_0_cookie_of_an_earlier_version_is_refused_with_the_way_out(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri)
    first = await serve_once(cfg)
    # What bookiesim wrote before: host:0 in the dirs, nothing in the store.
    old = read_dir_cookie(cookie_dirs(cfg)[0])
    assert old is not None
    for current in cookie_dirs(cfg):
        write_dir_cookie(current, old.__class__(**{**old.__dict__, "bookie_id": "127.0.0.1:0"}))
    async with open_store(uri) as store:
        await store.delete(f"{store.ledgers_root}/cookies/{first}")
    with pytest.raises(CookieError, match=r"names port 0 .*updatecookie --set bookiePort=PORT"):
        await BookieService(cfg).run()
    with pytest.raises(CookieError, match="names port 0"):
        await update_cookies(cfg)  # port 0 again: it cannot know the port
    port = int(first.rpartition(":")[2])
    lines = await update_cookies(cfg.replace(bookie_port=port))
    assert lines[-1] == f"stamped {uri} /ledgers/cookies/{first}"
    assert await serve_once(cfg) == first


async def test_updatecookie_with_port_0_and_no_cookie_asks_for_the_port(tmp_path: Path) -> None:
    with pytest.raises(UpdateRefusedError, match="set bookiePort"):
        await update_cookies(bookie_config(tmp_path))
