"""Upstream's ``GET /api/v1/ledger/read`` and ``/api/v1/bookie/list_bookie_info`` on a running
bookie (served by its client companion): the entries, the range and page parameters, the
disk space in upstream's strings, the sanity test, and the refusals as upstream answers them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.adminapi.bookie_info import readable
from bookiesim.adminapi.companion import AdminApiCompanion
from bookiesim.adminapi.ledger_read import ENTRIES_PER_PAGE, page_range
from bookiesim.bookie.process import BookieService
from bookiesim.client import BookKeeper
from bookiesim.cluster.testing import bookie_config
from bookiesim.metadata import open_store

from .test_http_upstream import call

if TYPE_CHECKING:
    from pathlib import Path

PATH = "/api/v1/ledger/read"


async def test_ledger_read(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    service = BookieService(
        bookie_config(tmp_path / "b", metadata_service_uri=uri), [AdminApiCompanion()]
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        assert service.address is not None
        port = service.address.http_port
        async with open_store(uri) as store, BookKeeper(store) as bk:
            handle = await bk.create_ledger(1, 1, 1)
            for n in range(5):
                await handle.add_entry(f"entry-{n}".encode())
            await handle.add_entry(b"\xff\x00ok")
            ledger_id = handle.ledger_id

            reply = await call(port, "GET", f"{PATH}?ledger_id={ledger_id}")
            assert reply.status == 200
            entries = reply.json()
            # Open ledger, no recovery: up to the last add confirmed (the last entry's LAC
            # is learnt with the next add, so it may not be there yet).
            assert {k: entries[k] for k in ("0", "4")} == {"0": "entry-0", "4": "entry-4"}
            await handle.close()
            closed = (await call(port, "GET", f"{PATH}?ledger_id={ledger_id}")).json()
            assert closed["5"] == "\ufffd\x00ok"  # non-ASCII bytes become U+FFFD
            assert list(closed) == [str(n) for n in range(6)]

            ranged = await call(
                port, "GET", f"{PATH}?ledger_id={ledger_id}&start_entry_id=2&end_entry_id=3"
            )
            assert ranged.json() == {"2": "entry-2", "3": "entry-3"}
            paged = (await call(port, "GET", f"{PATH}?ledger_id={ledger_id}&page=1")).json()
            assert paged["Entries for page: "] == "1"
            assert len(paged) == 7
            assert (await call(port, "GET", f"{PATH}?ledger_id={ledger_id}&page=2")).json() == {
                "Entries for page: ": "2"
            }
            conflict = await call(
                port, "GET", f"{PATH}?ledger_id={ledger_id}&start_entry_id=4&end_entry_id=1"
            )
            assert conflict.status == 500
            assert (await call(port, "GET", PATH)).status == 404
            assert (await call(port, "GET", f"{PATH}?ledger_id=abc")).status == 500
            assert (await call(port, "GET", f"{PATH}?ledger_id=424242")).status == 500
            assert (await call(port, "PUT", f"{PATH}?ledger_id={ledger_id}", {})).status == 404

            info = await call(port, "GET", "/api/v1/bookie/list_bookie_info")
            assert info.status == 200
            me = service.address.bookie_id
            assert list(info.json()) == [me, "ClusterInfo: "]
            total, _free = service.bookie.disk_usage()
            assert re.fullmatch(r": \{Free: \d+(\(.*\))?, Total: \d+(\(.*\))?\},", info.json()[me])
            assert f"Total: {total}{readable(total)}" in info.json()[me]
            assert info.json()["ClusterInfo: "].startswith("{Free: ")
            wrong = await call(port, "POST", "/api/v1/bookie/list_bookie_info", {})
            assert wrong.status == 404

            before = set(await bk.list_ledgers())
            sanity = await call(port, "GET", "/api/v1/bookie/sanity")
            assert (sanity.status, sanity.json()) == (200, {"passed": True, "readOnly": False})
            assert set(await bk.list_ledgers()) == before  # its ledger is deleted
            service.bookie.set_admin_read_only(True)
            refused = await call(port, "GET", "/api/v1/bookie/sanity")
            assert refused.json() == {"passed": False, "readOnly": False}
            service.bookie.set_admin_read_only(False)
            assert (await call(port, "PUT", "/api/v1/bookie/sanity", {})).status == 404
        nursery.cancel_scope.cancel()


def test_readable_sizes_as_upstream_writes_them() -> None:
    assert readable(999) == ""
    assert readable(1000) == "(1KB)"
    assert readable(1_500_000_000) == "(1.5GB)"
    assert readable(1_999_999) == "(1.999MB)"  # cut, not rounded
    assert readable(123_456_789_012_345) == "(123.456TB)"
    assert readable(5 * 10**18) == "(5000000TB)"


@given(
    st.integers(min_value=0, max_value=5000),
    st.integers(min_value=-1, max_value=5000),
    st.integers(min_value=1, max_value=6),
)
def test_a_page_narrows_the_range_to_itself(start: int, end: int, page: int) -> None:
    first, last = page_range(start, end, page)
    page_first = (page - 1) * ENTRIES_PER_PAGE
    assert last <= page_first + ENTRIES_PER_PAGE - 1
    assert first >= page_first
    assert page_range(start, end, -1) == (start, end)
