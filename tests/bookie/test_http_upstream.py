"""Upstream's admin HTTP API on a running bookie: each route's methods, parameters, statuses
and JSON shapes (keys and value types) as upstream 4.17.4's services answer them, and wrong
methods or parameters answered as upstream answers them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.http_upstream_bookie import shown_as_upstream
from bookiesim.bookie.http_upstream_cluster import LEDGERS_PER_PAGE, on_page
from bookiesim.bookie.http_upstream_routes import UPSTREAM_ROUTES
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.metadata import open_store
from bookiesim.metadata.ledgers import LedgerManager, LedgerMetadata
from bookiesim.metadata.underreplication import UnderReplicationManager
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from bookiesim.bookie.process import BookieService


class Reply:
    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def _http(port: int, method: str, path: str, body: bytes | None) -> Reply:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, response.headers["Content-Type"], response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.headers["Content-Type"], exc.read())


async def call(port: int, method: str, path: str, body: object = None) -> Reply:
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    return await trio.to_thread.run_sync(_http, port, method, path, data)


def shape(obj: object) -> object:
    """Keys and value types of a JSON value (what a script reading it relies on)."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(v) for v in obj]
    return type(obj).__name__


@pytest.fixture
async def bookie(tmp_path: Path) -> AsyncIterator[tuple[BookieService, int, str]]:
    uri = f"sqlite:///{tmp_path}/meta.db"
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri)
    async with running_bookie(cfg) as service:
        assert service.address is not None
        yield service, service.address.http_port, uri


async def test_heartbeat_answers_every_method(bookie: tuple[BookieService, int, str]) -> None:
    _, port, _ = bookie
    for method in ("GET", "PUT", "POST", "DELETE"):
        reply = await call(port, method, "/heartbeat")
        assert (reply.status, reply.text) == (200, "OK\n")


async def test_metrics_refuses_other_methods_with_403(
    bookie: tuple[BookieService, int, str],
) -> None:
    _, port, _ = bookie
    assert (await call(port, "GET", "/metrics")).status == 200
    refused = await call(port, "POST", "/metrics", {})
    assert (refused.status, refused.content_type) == (403, "text/plain; charset=utf-8")


async def test_server_config_get_and_put(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    reply = await call(port, "GET", "/api/v1/config/server_config")
    assert reply.status == 200
    config = reply.json()
    assert all(isinstance(v, str) for v in config.values())
    assert config["bookiePort"] == str(service.cfg.bookie_port)
    assert config["readOnlyModeEnabled"] == "true"
    body = {"someKey": 7, "x": "y", "flag": True, "hosts": "a:1,b:2", "items": [1, 2]}
    put = await call(port, "PUT", "/api/v1/config/server_config", body)
    assert (put.status, put.text) == (200, "Success set server config.")
    after = (await call(port, "GET", "/api/v1/config/server_config")).json()
    assert {k: after[k] for k in body} == {
        "someKey": "7",
        "x": "y",
        "flag": "true",
        "hosts": "[a:1, b:2]",
        "items": "[1, 2]",
    }
    assert (await call(port, "PUT", "/api/v1/config/server_config")).status == 404
    assert (await call(port, "PUT", "/api/v1/config/server_config", b"[1]")).status == 500
    assert (await call(port, "DELETE", "/api/v1/config/server_config")).status == 404


async def test_bookie_info(bookie: tuple[BookieService, int, str]) -> None:
    _, port, _ = bookie
    reply = await call(port, "GET", "/api/v1/bookie/info")
    assert reply.status == 200
    info = reply.json()
    assert isinstance(info["freeSpace"], int)
    assert isinstance(info["totalSpace"], int)
    assert 0 < info["freeSpace"] <= info["totalSpace"]
    assert (await call(port, "PUT", "/api/v1/bookie/info", {})).status == 404


async def test_list_bookies(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    assert service.address is not None
    me = service.address.bookie_id
    for query in ("", "?type=rw", "?type=anything"):
        reply = await call(port, "GET", f"/api/v1/bookie/list_bookies{query}")
        assert (reply.status, reply.json()) == (200, {me: None})
    named = await call(port, "GET", "/api/v1/bookie/list_bookies?print_hostnames=true")
    assert named.json() == {me: service.address.host}
    assert (await call(port, "GET", "/api/v1/bookie/list_bookies?type=ro")).json() == {}
    assert (await call(port, "POST", "/api/v1/bookie/list_bookies", {})).status == 404


async def test_cluster_info(bookie: tuple[BookieService, int, str]) -> None:
    _, port, uri = bookie
    reply = await call(port, "GET", "/api/v1/bookie/cluster_info")
    assert reply.status == 200
    assert reply.json() == {
        "auditorElected": False,
        "auditorId": "",
        "clusterUnderReplicated": False,
        "ledgerReplicationEnabled": True,
        "totalBookiesCount": 1,
        "writableBookiesCount": 1,
        "readonlyBookiesCount": 0,
        "unavailableBookiesCount": 0,
    }
    async with open_store(uri) as store:
        urm = UnderReplicationManager(store)
        await urm.mark_under_replicated(7, ["10.0.0.9:3181"])
        await urm.disable()
    after = (await call(port, "GET", "/api/v1/bookie/cluster_info")).json()
    assert (after["clusterUnderReplicated"], after["ledgerReplicationEnabled"]) == (True, False)
    assert (await call(port, "PUT", "/api/v1/bookie/cluster_info", {})).status == 404


async def test_state_and_is_ready(bookie: tuple[BookieService, int, str]) -> None:
    _, port, _ = bookie
    state = await call(port, "GET", "/api/v1/bookie/state")
    assert state.status == 200
    assert state.json() == {
        "running": True,
        "readOnly": False,
        "shuttingDown": False,
        "availableForHighPriorityWrites": True,
    }
    ready = await call(port, "GET", "/api/v1/bookie/is_ready")
    assert (ready.status, ready.text) == (200, "OK")
    assert (await call(port, "PUT", "/api/v1/bookie/state", {})).status == 404
    assert (await call(port, "PUT", "/api/v1/bookie/is_ready", {})).status == 404


async def test_gc_trigger_status_and_details(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    assert service.address is not None
    status = await call(port, "GET", "/api/v1/bookie/gc")
    assert status.status == 200
    assert status.json()["is_in_force_gc"] in ("true", "false")
    trigger = await call(port, "PUT", "/api/v1/bookie/gc")
    assert trigger.status == 200
    assert trigger.json() == f"Triggered GC on BookieServer: {service.address.bookie_id}"
    with_flags = await call(port, "PUT", "/api/v1/bookie/gc", {"forceMajor": False})
    assert with_flags.status == 200
    assert isinstance(with_flags.json(), str)
    # Upstream's GC service alone answers a wrong method with 405.
    assert (await call(port, "DELETE", "/api/v1/bookie/gc")).status == 405
    details = await call(port, "GET", "/api/v1/bookie/gc_details")
    assert details.status == 200
    (gc,) = details.json()
    upstream_fields = {
        "forceCompacting": "bool",
        "majorCompacting": "bool",
        "minorCompacting": "bool",
        "lastMajorCompactionTime": "int",
        "lastMinorCompactionTime": "int",
        "lastEntryLocationCompactionTime": "int",
        "majorCompactionCounter": "int",
        "minorCompactionCounter": "int",
        "entryLocationCompactionCounter": "int",
    }
    assert {k: shape(gc[k]) for k in upstream_fields} == upstream_fields
    assert (await call(port, "PUT", "/api/v1/bookie/gc_details", {})).status == 404


async def test_list_disk_file(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    async with bookie_client(service) as client:
        assert (await client.add(5, 0, b"x" * 100)).status == pb.EOK
    everything = (await call(port, "GET", "/api/v1/bookie/list_disk_file")).json()
    assert set(everything) == {"journal files", "entrylog files", "index files"}
    assert all(isinstance(v, str) for v in everything.values())
    journals = everything["journal files"].split("\t")
    assert journals[-1] == ""
    assert all(name.endswith(".txn") for name in journals[:-1])
    assert journals[:-1]
    for file_type, key in (("journal", "journal files"), ("entrylog", "entrylog files")):
        reply = await call(port, "GET", f"/api/v1/bookie/list_disk_file?file_type={file_type}")
        assert list(reply.json()) == [key]
    unknown = await call(port, "GET", "/api/v1/bookie/list_disk_file?file_type=nonsense")
    assert set(unknown.json()) == set(everything)
    assert (await call(port, "DELETE", "/api/v1/bookie/list_disk_file")).status == 404


async def test_last_log_mark(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    await service.bookie.checkpoint()
    reply = await call(port, "GET", "/api/v1/bookie/last_log_mark")
    assert reply.status == 200
    ((key, value),) = reply.json().items()
    (mark,) = service.bookie.journals.synced_marks
    assert key == f"LastLogMark: Journal Id - {mark.file_id}({mark.file_id:x}.txn)"
    assert value.startswith("Pos - ")
    assert int(value.removeprefix("Pos - ")) >= 0
    assert (await call(port, "PUT", "/api/v1/bookie/last_log_mark", {})).status == 404


async def test_last_log_mark_of_two_journals(tmp_path: Path) -> None:
    # Upstream answers one line per journal, each from its own lastMark.<i>.
    root = tmp_path / "b"
    cfg = bookie_config(root, journal_directories=(root / "j0", root / "j1"))
    async with running_bookie(cfg) as service, bookie_client(service) as client:
        assert service.address is not None
        for ledger_id in (1, 2):
            assert (await client.add(ledger_id, 0, b"x")).status == pb.EOK
        marks = await service.bookie.checkpoint()
        reply = await call(service.address.http_port, "GET", "/api/v1/bookie/last_log_mark")
    assert reply.status == 200
    assert reply.json() == {
        f"LastLogMark: Journal Id - {m.file_id}({m.file_id:x}.txn)": f"Pos - {m.offset}"
        for m in marks
    }
    assert len(marks) == 2
    assert all(m.offset > 0 for m in marks)


async def test_read_only_state(bookie: tuple[BookieService, int, str]) -> None:
    service, port, _ = bookie
    path = "/api/v1/bookie/state/readonly"
    assert (await call(port, "GET", path)).json() == {"readOnly": False}
    turned = await call(port, "PUT", path, {"readOnly": True})
    assert (turned.status, turned.json()) == (200, {"readOnly": True})
    assert service.bookie.is_read_only
    async with bookie_client(service) as client:
        assert (await client.add(9, 0, b"y")).status != pb.EOK
    # Registered read-only, as upstream's transition: clients stop choosing it.
    assert service.address is not None
    ro = "/api/v1/bookie/list_bookies?type=ro"
    with trio.fail_after(10):
        while service.address.bookie_id not in (await call(port, "GET", ro)).json():  # noqa: ASYNC110
            await trio.sleep(0.05)
    back = await call(port, "PUT", path, {"readOnly": False})
    assert (back.status, back.json()) == (200, {"readOnly": False})
    assert (await call(port, "PUT", path, b"not json")).status == 500
    assert (await call(port, "DELETE", path)).status == 404


async def test_read_only_refused_when_read_only_mode_is_disabled(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path / "b", read_only_mode_enabled=False)
    async with running_bookie(cfg) as service:
        assert service.address is not None
        port = service.address.http_port
        reply = await call(port, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True})
        assert reply.status == 400
        assert not service.bookie.is_read_only


def ledger(bookie_id: str) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles={0: (bookie_id,)},
        password=b"pw",
        custom_metadata={"app": b"test"},
    )


async def test_ledger_list_and_metadata(bookie: tuple[BookieService, int, str]) -> None:
    service, port, uri = bookie
    assert service.address is not None
    async with open_store(uri) as store:
        manager = LedgerManager(store)
        ids = [await manager.create(ledger(service.address.bookie_id)) for _ in range(3)]
    listed = await call(port, "GET", "/api/v1/ledger/list")
    assert (listed.status, listed.json()) == (200, {str(i): None for i in ids})
    with_meta = (await call(port, "GET", "/api/v1/ledger/list?print_metadata=true")).json()
    assert list(with_meta) == [str(i) for i in ids]
    assert all("BookieMetadataFormatVersion" in v for v in with_meta.values())
    decoded = await call(port, "GET", "/api/v1/ledger/list?print_metadata=true&decode_meta=true")
    assert [m["ledgerId"] for m in decoded.json().values()] == ids
    page_2 = await call(port, "GET", "/api/v1/ledger/list?print_metadata=true&page=2")
    assert page_2.json() == {}
    assert (await call(port, "GET", "/api/v1/ledger/list?print_metadata=true&page=x")).status == 500
    assert (await call(port, "PUT", "/api/v1/ledger/list", {})).status == 404

    reply = await call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={ids[0]}")
    assert reply.status == 200
    (metadata,) = reply.json().values()
    assert shape(metadata) == {
        "ledgerId": "int",
        "metadataFormatVersion": "int",
        "ensembleSize": "int",
        "writeQuorumSize": "int",
        "ackQuorumSize": "int",
        "state": "str",
        "length": "int",
        "lastEntryId": "int",
        "ctime": "int",
        "closed": "bool",
        "allEnsembles": {"0": [{"id": "str"}]},
        "digestType": "str",
        "password": "str",
        "customMetadata": {"app": "str"},
        "ctoken": "int",
    }
    assert metadata["allEnsembles"]["0"] == [{"id": service.address.bookie_id}]
    assert (metadata["state"], metadata["digestType"], metadata["password"]) == (
        "OPEN",
        "CRC32C",
        "cHc=",
    )
    assert (await call(port, "GET", "/api/v1/ledger/metadata")).status == 404
    assert (await call(port, "GET", "/api/v1/ledger/metadata?ledger_id=x")).status == 500
    assert (await call(port, "GET", "/api/v1/ledger/metadata?ledger_id=999999")).status == 500

    deleted = await call(port, "DELETE", f"/api/v1/ledger/delete?ledger_id={ids[1]}")
    assert (deleted.status, deleted.json()) == (200, f"Deleted ledger: {ids[1]}")
    left = (await call(port, "GET", "/api/v1/ledger/list")).json()
    assert left == {str(ids[0]): None, str(ids[2]): None}
    assert (await call(port, "DELETE", "/api/v1/ledger/delete")).status == 404
    assert (await call(port, "DELETE", f"/api/v1/ledger/delete?ledger_id={ids[1]}")).status == 500
    assert (await call(port, "GET", f"/api/v1/ledger/delete?ledger_id={ids[0]}")).status == 404


@given(st.lists(st.text(alphabet="abc:/ ", min_size=1), min_size=1, max_size=4))
def test_config_values_show_as_upstreams_lists(parts: list[str]) -> None:
    shown = shown_as_upstream(",".join(parts))
    if len(parts) == 1:
        assert shown == parts[0]
    else:
        assert shown == "[" + ", ".join(p.strip() for p in parts) + "]"


@given(st.integers(min_value=1, max_value=1000))
def test_pages_cover_every_ledger_once(count: int) -> None:
    pages = (count // LEDGERS_PER_PAGE) + 2
    seen = [p for i in range(1, count + 1) for p in range(1, pages + 1) if on_page(i, p)]
    assert len(seen) == count  # each ledger on exactly one page
    assert all(on_page(i, 0) for i in range(1, count + 1))


def test_route_table_names_each_path_once_and_routes_what_it_serves() -> None:
    paths = [r.path for r in UPSTREAM_ROUTES]
    assert len(paths) == len(set(paths))
    assert all(r.methods and r.wrong_method_status in (403, 404, 405) for r in UPSTREAM_ROUTES)


async def test_every_served_bookie_route_is_routed_with_upstream_methods(
    bookie: tuple[BookieService, int, str],
) -> None:
    service, _, uri = bookie
    async with open_store(uri) as store:
        router = service.admin_router(store)
    for route in UPSTREAM_ROUTES:
        if route.served and route.group in ("bookie", "gc", "metrics", "cluster"):
            allowed = set(router.allowed(route.path)) - {"HEAD"}
            assert allowed == set(route.methods), route.path


async def test_every_other_method_is_answered_as_upstream(
    bookie: tuple[BookieService, int, str],
) -> None:
    """On every route this bookie serves, each method upstream's service does not act on
    gets upstream's status (404; 405 on gc; 403 on /metrics) and a line of text."""
    _, port, _ = bookie
    checked = 0
    for route in UPSTREAM_ROUTES:
        if not route.served or route.group not in ("bookie", "gc", "metrics", "cluster"):
            continue
        for method in ("GET", "PUT", "POST", "DELETE"):
            if method in route.methods:
                continue
            reply = await call(port, method, route.path, b"{}")
            assert reply.status == route.wrong_method_status, (method, route.path)
            assert reply.content_type.startswith("text/plain"), (method, route.path)
            checked += 1
    assert checked > 40
    # A route of upstream that bookiesim does not serve is an unknown path.
    assert (await call(port, "PUT", "/api/v1/bookie/expand_storage")).status == 404
