"""Cookies: upstream's bytes, upstream's rules, and the start-up check that enforces them.

The codec is compared with the cookies upstream 4.17.4 wrote (``disk/VERSION.*.bin`` and
``zk/01…/cookies/*`` in the vectors) and round-tripped by hypothesis. The check is driven the
way an operator meets it: fresh start, restart, another bookie id on the same directories,
directories copied elsewhere, a cookie missing in one directory, a replaced disk, and the
directories of the previous bookiesim (no cookies anywhere), which are adopted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie import exit_codes
from bookiesim.bookie.cookie_check import (
    CookieError,
    check_cookies,
    cookie_dirs,
    expected_cookie,
    read_dir_cookie,
    stamp_cookies,
)
from bookiesim.bookie.index_format import HEADER_SIZE, PAGE_SIZE, index_path
from bookiesim.bookie.process import BookieService
from bookiesim.cluster.in_process import stable_port
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import instance_id
from bookiesim.metadata.cookies import Cookie, CookieFormatError, encode_dir_paths
from tests.cli.test_errors import bookie as bookie_process
from tests.interop.vectors import upstream_dir

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig

# -- the codec -------------------------------------------------------------------------------


def recorded_cookies() -> list[Path]:
    root = upstream_dir()
    return [
        root / "disk" / "VERSION.journal.bin",
        root / "disk" / "VERSION.ledgers.bin",
        *sorted((root / "zk" / "01-after-init-3-bookies/nodes/ledgers/cookies").glob("127*.bin")),
        *sorted((root / "disk" / "zk-metadata/nodes/ledgers/cookies").glob("127*.bin")),
    ]


def test_upstream_cookies_decode_and_encode_to_the_same_bytes() -> None:
    files = recorded_cookies()
    assert len(files) == 6
    for path in files:
        data = path.read_bytes()
        cookie = Cookie.decode(data, str(path))
        assert cookie.encode() == data, path
        assert cookie.layout_version == 5
        assert cookie.bookie_id.startswith("127.0.0.1:")
        assert cookie.index_dirs is None
        assert cookie.instance_id is not None
        assert len(cookie.instance_id) == 36


def test_our_cookie_for_upstreams_fields_is_upstreams_file() -> None:
    data = (upstream_dir() / "disk" / "VERSION.ledgers.bin").read_bytes()
    ours = Cookie.for_bookie(
        "127.0.0.1:35181",
        ["/tmp/vec/bd/journal"],
        ["/tmp/vec/bd/ledgers"],
        instance_id="6d879652-9bc4-4e3a-a1cc-d087cb299cd4",
    )
    assert ours.encode() == data
    assert ours.ledger_dirs == "1\t/tmp/vec/bd/ledgers"


def test_field_order_escapes_and_optional_fields() -> None:
    cookie = Cookie.for_bookie(
        'h"\\:1', ["/j1", "/j2"], ["/l1", "/l2"], index_dirs=["/i"], instance_id="x"
    )
    assert cookie.encode() == (
        b'5\nbookieHost: "h\\"\\\\:1"\njournalDir: "/j1,/j2"\n'
        b'ledgerDirs: "2\\t/l1\\t/l2"\ninstanceId: "x"\nindexDirs: "1\\t/i"\n'
    )
    # protobuf-java's escapes: named ones, octal UTF-8 bytes for the rest.
    odd = Cookie("\x07\x0b\u00e9", "j", "0")
    assert b'bookieHost: "\\a\\v\\303\\251"' in odd.encode()
    assert Cookie.decode(odd.encode()) == odd


def test_version_3_cookies_are_read() -> None:
    old = Cookie.decode(b"3\n127.0.0.1:3181\n/j\n1\t/l\n")
    assert (old.bookie_id, old.journal_dirs, old.ledger_dirs, old.layout_version) == (
        "127.0.0.1:3181",
        "/j",
        "1\t/l",
        3,
    )
    assert Cookie.for_bookie("127.0.0.1:3181", ["/j"], ["/l"]).mismatches(old) == []
    too_old = Cookie.decode(b"2\nwhatever\n")
    assert [m.field for m in Cookie("a", "b", "c").mismatches(too_old)] == ["layoutVersion"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "first line '' is not a layout version"),
        (b"five\n", "first line 'five'"),
        (b"5\nbookieHost: 1\n", "not a cookie"),
        (b'5\nbookieHost: "a"\n', "cookie without journalDir, ledgerDirs"),
        (b'5\nnoSuchField: "a"\n', "not a cookie"),
        (b"\xff\xfe", "not UTF-8"),
        (b"3\nonly\n", "3 lines"),
    ],
)
def test_bad_cookies_name_where_they_came_from(data: bytes, message: str) -> None:
    with pytest.raises(CookieFormatError, match=r"^/x/VERSION: ") as info:
        Cookie.decode(data, "/x/VERSION")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
dir_lists = st.lists(st.text(st.characters(exclude_categories=["Cs"]), min_size=1), max_size=4)


@given(
    bookie_id=texts,
    journal=texts,
    ledgers=dir_lists,
    index=st.none() | dir_lists,
    instance=st.none() | texts,
)
def test_any_cookie_round_trips(
    bookie_id: str,
    journal: str,
    ledgers: list[str],
    index: list[str] | None,
    instance: str | None,
) -> None:
    cookie = Cookie.for_bookie(
        bookie_id, [journal], ledgers, index_dirs=index, instance_id=instance
    )
    data = cookie.encode()
    assert data.isascii()
    decoded = Cookie.decode(data)
    # Upstream reads an empty optional as absent, and so do we.
    assert decoded == cookie
    assert decoded.mismatches(cookie) == []


def test_mismatches_follow_upstreams_rules() -> None:
    mine = Cookie.for_bookie("b:1", ["/j"], ["/l1", "/l2"], instance_id="i")
    assert mine.mismatches(mine) == []
    other = Cookie.for_bookie("b:2", ["/j2"], ["/l1"], instance_id=None)
    assert [m.field for m in mine.mismatches(other)] == [
        "bookieHost",
        "journalDir",
        "ledgerDirs",
        "indexDirs",
        "instanceId",
    ]
    # Storage expansion: the configured ledger dirs may be a superset of the cookie's.
    smaller = Cookie.for_bookie("b:1", ["/j"], ["/l1"], instance_id="i")
    assert mine.mismatches(smaller, allow_expansion=True) == []
    assert [m.field for m in smaller.mismatches(mine, allow_expansion=True)] == [
        "ledgerDirs",
        "indexDirs",
    ]
    # No index dirs in a cookie means "the ledger dirs".
    explicit = Cookie("b:1", "/j", encode_dir_paths(["/l1", "/l2"]), "i", mine.ledger_dirs)
    assert mine.mismatches(explicit) == []


# -- the start-up check ------------------------------------------------------------------------


def fixed_port_config(root: Path, port: int, **overrides: object) -> BookieConfig:
    return bookie_config(root, bookie_port=port, **overrides)


def stamped(cfg: BookieConfig) -> list[Cookie | None]:
    return [read_dir_cookie(d) for d in cookie_dirs(cfg)]


async def write_some(cfg: BookieConfig) -> None:
    async with running_bookie(cfg) as svc, bookie_client(svc) as client:
        for e in range(3):
            assert (await client.add(1, e, b"x%d" % e)).status == 0


async def test_fresh_start_stamps_dirs_and_store_then_restart_passes(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    port = stable_port()
    cfg = fixed_port_config(tmp_path / "b", port, metadata_service_uri=uri)
    await write_some(cfg)
    async with open_store(uri) as store:
        instance = await instance_id(store)
        node = await store.get(f"/ledgers/cookies/127.0.0.1:{port}")
    assert instance is not None
    assert node is not None
    expected = expected_cookie(cfg, instance)
    assert Cookie.decode(node.value) == expected
    assert stamped(cfg) == [expected, expected]
    assert (tmp_path / "b/journal/current/VERSION").read_bytes() == expected.encode()
    await write_some(cfg)  # the restart passes
    async with open_store(uri) as store:
        assert (await store.get(f"/ledgers/cookies/127.0.0.1:{port}")) == node  # unchanged


async def test_without_a_store_only_the_dirs_are_stamped_without_an_instance_id(
    tmp_path: Path,
) -> None:
    cfg = bookie_config(tmp_path)
    async with running_bookie(cfg) as svc:
        assert svc.address is not None
        bound = svc.address.bookie_id
    cookies = stamped(cfg)
    assert cookies[0] is not None
    assert cookies[0].instance_id is None
    assert cookies[0].bookie_id == bound  # bookiePort=0: the port bound, the id it serves as
    assert cookies == [cookies[0]] * 2
    await write_some(cfg)


async def test_another_bookie_id_on_the_same_dirs_is_refused(tmp_path: Path) -> None:
    port = stable_port()
    await write_some(fixed_port_config(tmp_path, port))
    other = fixed_port_config(tmp_path, port + 1)
    with pytest.raises(CookieError) as info:
        await BookieService(other).run()
    message = str(info.value)
    assert message.startswith(f"{tmp_path}/journal/current/VERSION: cookie of bookie 127.0.0.1:")
    assert f'bookieHost "127.0.0.1:{port}" (configured: "127.0.0.1:{port + 1}")' in message
    assert "\n" not in message
    assert not (tmp_path / "ledgers/current/lastMark.tmp").exists()


async def test_dirs_copied_to_another_path_are_refused(tmp_path: Path) -> None:
    import shutil

    port = stable_port()
    await write_some(fixed_port_config(tmp_path / "a", port))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = fixed_port_config(tmp_path / "b", port)
    with pytest.raises(CookieError) as info:
        await BookieService(moved).run()
    message = str(info.value)
    assert message.startswith(f"{tmp_path}/b/journal/current/VERSION: ")
    assert f'journalDir "{tmp_path}/a/journal" (configured: "{tmp_path}/b/journal")' in message
    # `bookiesim shell updatecookie` is how an operator says the move was on purpose.
    await stamp_cookies(moved)
    await write_some(moved)


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_cookie_missing_in_one_dir_is_refused(tmp_path: Path, with_store: bool) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db" if with_store else ""
    cfg = fixed_port_config(tmp_path, stable_port(), metadata_service_uri=uri)
    await write_some(cfg)
    (tmp_path / "ledgers/current/VERSION").unlink()
    with pytest.raises(CookieError) as info:
        await BookieService(cfg).run()
    assert str(info.value).startswith(f"{tmp_path}/ledgers/current: no cookie (VERSION)")


async def test_a_replaced_disk_is_refused_as_upstream_does(tmp_path: Path) -> None:
    # The store remembers the bookie; its directories are new and empty.
    import shutil

    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = fixed_port_config(tmp_path / "b", stable_port(), metadata_service_uri=uri)
    await write_some(cfg)
    shutil.rmtree(tmp_path / "b")
    with pytest.raises(CookieError, match=r"journal/current, .*ledgers/current: no cookie"):
        await BookieService(cfg).run()
    assert not (tmp_path / "b/journal/current/VERSION").exists()


async def test_dirs_with_cookies_but_none_in_the_store_are_refused(tmp_path: Path) -> None:
    port = stable_port()
    cfg = fixed_port_config(tmp_path / "b", port, metadata_service_uri=f"sqlite:///{tmp_path}/m")
    await write_some(cfg)
    async with open_store(cfg.metadata_service_uri) as store:
        await store.delete(f"/ledgers/cookies/127.0.0.1:{port}")
    with pytest.raises(CookieError, match="no cookie in the metadata store for bookie"):
        await BookieService(cfg).run()


async def test_another_cluster_is_refused(tmp_path: Path) -> None:
    port = stable_port()
    cfg = fixed_port_config(tmp_path / "b", port, metadata_service_uri=f"sqlite:///{tmp_path}/1")
    await write_some(cfg)
    elsewhere = cfg.replace(metadata_service_uri=f"sqlite:///{tmp_path}/2")
    with pytest.raises(CookieError, match="instanceId"):
        await BookieService(elsewhere).run()


async def test_previous_version_dirs_are_adopted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = fixed_port_config(tmp_path / "b", stable_port(), metadata_service_uri=uri)
    await write_some(cfg)
    # What the previous bookiesim left: the same files, no cookie anywhere, index files
    # ending at their last location.
    for current in cookie_dirs(cfg):
        (current / "VERSION").unlink()
    async with open_store(uri) as store:
        await store.delete(f"/ledgers/cookies/127.0.0.1:{cfg.bookie_port}")
    idx = index_path(cfg.ledger_directories[0], 1)
    with idx.open("r+b") as fh:
        fh.truncate(HEADER_SIZE + 3 * 8)
    with caplog.at_level(logging.WARNING, logger="bookiesim.bookie.cookie_check"):
        async with running_bookie(cfg) as svc, bookie_client(svc) as client:
            assert (await client.read(1, 2)).status == 0
    assert "adopting directories written before cookies" in caplog.text
    assert f"{tmp_path}/b/journal/current" in caplog.text
    assert idx.stat().st_size == HEADER_SIZE + PAGE_SIZE
    assert stamped(cfg) == [expected_cookie(cfg, stamped(cfg)[0].instance_id)] * 2  # type: ignore[union-attr]
    await write_some(cfg)


async def test_a_ledger_dir_added_to_the_configuration_is_refused(tmp_path: Path) -> None:
    # Upstream's allowStorageExpansion is not configurable here: the dirs must be equal.
    cfg = fixed_port_config(tmp_path, stable_port())
    await write_some(cfg)
    more = cfg.replace(ledger_directories=(*cfg.ledger_directories, tmp_path / "ledgers2"))
    with pytest.raises(CookieError) as info:
        await BookieService(more).run()
    assert '(configured: "2\\t' in str(info.value)


async def test_unstamped_data_beside_stamped_dirs_is_not_a_new_bookie(tmp_path: Path) -> None:
    # Neither the store's cookie (gone) nor a migration (one dir has a cookie): refused.
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = fixed_port_config(tmp_path, stable_port(), metadata_service_uri=uri)
    await write_some(cfg)
    async with open_store(uri) as store:
        await store.delete(f"/ledgers/cookies/127.0.0.1:{cfg.bookie_port}")
    (tmp_path / "ledgers/current/VERSION").unlink()
    with pytest.raises(CookieError, match="ledgers/current: holds data but no cookie, while"):
        await BookieService(cfg).run()


async def test_check_cookies_reports_what_it_stamped(tmp_path: Path) -> None:
    cfg = fixed_port_config(tmp_path, stable_port())
    first = await check_cookies(cfg)
    assert first.stamped == cookie_dirs(cfg)
    assert not first.adopted
    again = await check_cookies(cfg)
    assert again.stamped == []
    assert again.stamped_store is None


def test_a_refused_bookie_process_exits_with_its_own_code(tmp_path: Path) -> None:
    port = stable_port()
    trio.run(write_some, fixed_port_config(tmp_path, port))
    proc = bookie_process(tmp_path, f"bookiePort={port + 1}")
    assert proc.returncode == exit_codes.INVALID_COOKIE == 4
    assert proc.stdout == ""  # never announced itself ready
    refused = [line for line in proc.stderr.splitlines() if "refusing to start" in line]
    assert len(refused) == 1
    assert f"{tmp_path}/journal/current/VERSION: cookie of bookie 127.0.0.1:{port}" in refused[0]
    assert "Traceback" not in proc.stderr


# -- bookiesim shell updatecookie ------------------------------------------------------------


async def test_updatecookie_refuses_a_running_bookie_and_restamps_a_moved_one(
    tmp_path: Path,
) -> None:
    import shutil

    from bookiesim.cli.shell.cookies import UpdateRefusedError, update_cookies

    uri = f"sqlite:///{tmp_path}/meta.db"
    port = stable_port()
    cfg = fixed_port_config(tmp_path / "a", port, metadata_service_uri=uri)
    async with running_bookie(cfg):
        with pytest.raises(UpdateRefusedError, match=f"bookie 127.0.0.1:{port} is registered"):
            await update_cookies(cfg)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = fixed_port_config(tmp_path / "b", port, metadata_service_uri=uri)
    with pytest.raises(CookieError, match="journalDir"):
        await BookieService(moved).run()
    lines = await update_cookies(moved)
    assert lines == [
        f"stamped {tmp_path}/b/journal/current/VERSION",
        f"stamped {tmp_path}/b/ledgers/current/VERSION",
        f"stamped {uri} /ledgers/cookies/127.0.0.1:{port}",
    ]
    await write_some(moved)
    async with open_store(uri) as store:
        node = await store.get(f"/ledgers/cookies/127.0.0.1:{port}")
        assert node is not None
        assert Cookie.decode(node.value) == expected_cookie(moved, await instance_id(store))


def test_updatecookie_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bookiesim.cli.main import main

    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        f"bookiePort=3999\njournalDirectory={tmp_path}/j\nledgerDirectories={tmp_path}/l\n"
    )
    assert main(["shell", "updatecookie", "--conf", str(conf)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"stamped {tmp_path}/j/current/VERSION",
        f"stamped {tmp_path}/l/current/VERSION",
    ]
    cookie = read_dir_cookie(tmp_path / "l" / "current")
    assert cookie is not None
    assert cookie.bookie_id == "127.0.0.1:3999"
    assert main(["shell", "updatecookie", "--set", "noSuchKey=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bookiesim shell updatecookie: ")
    assert "noSuchKey" in err
