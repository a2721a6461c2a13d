"""The ``/api/v1/autorecovery/...`` admin routes, on a cluster whose bookies run auto-recovery.

Why: scripts written for upstream's HTTP admin API must get upstream's answers here (the same
paths, the same words and JSON on success), every refusal must say what was wrong, and the
two background jobs (recover, decommission) must really heal the cluster. Requests go to a
bookie's router directly (``AdminRouter.dispatch``: no sockets needed to test the routes; the
embedding hook's own test serves them over HTTP).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.bookie.http_admin import AdminRequest, AdminResponse
from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import LocalCluster, running_cluster
from bookiesim.metadata.cookies import cookie_node
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from pathlib import Path

P = "/api/v1/autorecovery"
# A long delay: the auditor marks nothing by itself unless a test shortens it.
SLOW = AutoRecoveryConfig(lost_bookie_recovery_delay=3600.0)
FAST = AutoRecoveryConfig(
    lost_bookie_recovery_delay=0.0, open_ledger_rereplication_grace_period=0.2
)


async def call(
    cluster: LocalCluster,
    method: str,
    path: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    bookie: str | None = None,
) -> AdminResponse:
    router = cluster.bookies[bookie or cluster.running_ids()[0]].admin
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    return await router.dispatch(AdminRequest(method, f"{P}/{path}", query or {}, raw))


def text(response: AdminResponse) -> str:
    return response.body.decode()


def error(response: AdminResponse) -> str:
    """A refusal's line of text (upstream refuses with text)."""
    assert response.content_type.startswith("text/plain")
    return text(response)


async def write_ledgers(cluster: LocalCluster, n: int) -> list[int]:
    ids = []
    async with BookKeeper(cluster.store) as bk:
        for _ in range(n):
            lh = await bk.create_ledger(3, 2, 2)
            for i in range(10):
                await lh.add_entry(b"entry %d" % i)
            await lh.close()
            ids.append(lh.ledger_id)
    return ids


async def naming(cluster: LocalCluster, bookie: str) -> list[int]:
    ledgers = LedgerManager(cluster.store)
    out = []
    for lid in await ledgers.list_ledgers():
        metadata, _ = await ledgers.read(lid)
        if bookie in metadata.bookies():
            out.append(lid)
    return out


async def until(predicate: Any) -> None:
    with trio.fail_after(20):
        while not await predicate():  # noqa: ASYNC110 (state in the store, no event to wait on)
            await trio.sleep(0.05)


async def test_status_auditor_delay_and_trigger(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 3, autorecovery=SLOW) as cluster:
        first = next(iter(cluster.bookies))  # the first to vote is elected
        response = await call(cluster, "GET", "who_is_auditor")
        assert (response.status, text(response)) == (200, f"Auditor: {first}")

        response = await call(cluster, "GET", "status")
        assert json.loads(response.body) == {"enabled": True}
        response = await call(cluster, "PUT", "status", query={"enabled": "false"})
        assert json.loads(response.body) == {"enabled": False}
        assert await UnderReplicationManager(cluster.store).is_enabled() is False
        response = await call(cluster, "PUT", "trigger_audit")
        assert response.status == 404
        assert "auto-recovery is disabled" in error(response)
        response = await call(cluster, "PUT", "status", query={"enabled": "TRUE"})
        assert json.loads(response.body) == {"enabled": True}
        response = await call(cluster, "PUT", "status")
        assert (response.status, error(response)) == (400, "the query has no enabled=true|false")

        response = await call(cluster, "GET", "lost_bookie_recovery_delay")
        assert text(response) == "lostBookieRecoveryDelay value: 3600"
        response = await call(cluster, "PUT", "lost_bookie_recovery_delay", {"delay_seconds": 60})
        assert (response.status, text(response)) == (
            200,
            "Success set lostBookieRecoveryDelay to 60",
        )
        response = await call(cluster, "GET", "lost_bookie_recovery_delay", bookie=first)
        assert text(response) == "lostBookieRecoveryDelay value: 60"
        for bad, why in (
            (None, "a JSON object body is required"),
            (b"{", "request body is not JSON"),
            ([60], "must be a JSON object, not list"),
            ({"delay": 60}, 'the body has no "delay_seconds"'),
            ({"delay_seconds": "60"}, '"delay_seconds" must be whole seconds'),
            ({"delay_seconds": -1}, "must be 0 or more seconds, got -1"),
        ):
            response = await call(cluster, "PUT", "lost_bookie_recovery_delay", bad)
            assert response.status == 404
            assert why in error(response)

        response = await call(cluster, "PUT", "trigger_audit")
        assert (response.status, text(response)) == (200, "Success trigger audit.")
        response = await call(cluster, "GET", "trigger_audit")
        assert response.status == 404  # as upstream

        await cluster.stop_autorecovery(first)  # the auditor goes; the next one takes over
        await until(lambda: _auditor_is_not(cluster, first))
        for bookie in cluster.running_ids():
            await cluster.stop_autorecovery(bookie)
        response = await call(cluster, "GET", "who_is_auditor", bookie=first)
        assert (response.status, text(response)) == (404, "No auditor elected")


async def _auditor_is_not(cluster: LocalCluster, bookie: str) -> bool:
    auditor = await UnderReplicationManager(cluster.store).auditor()
    return auditor not in (None, bookie)


async def test_list_under_replicated_as_upstream(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 3, autorecovery=SLOW) as cluster:
        response = await call(cluster, "GET", "list_under_replicated_ledger")
        assert (response.status, text(response)) == (404, "No under replicated ledgers found")
        # Paused, so that no worker removes these marks of ledgers that do not exist.
        await call(cluster, "PUT", "status", query={"enabled": "false"})
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(5, ["10.0.0.1:3181"])
        await urm.mark_under_replicated(9, ["10.0.0.1:3181", "10.0.0.2:3181"])
        response = await call(cluster, "GET", "list_under_replicated_ledger")
        assert json.loads(response.body) == [5, 9]
        query = {"missingreplica": "10.0.0.1:3181", "printmissingreplica": ""}
        response = await call(cluster, "GET", "list_under_replicated_ledger", query=query)
        assert json.loads(response.body) == {
            "5": ["10.0.0.1:3181"],
            "9": ["10.0.0.1:3181", "10.0.0.2:3181"],
        }
        query = {"excludingmissingreplica": "10.0.0.2:3181"}
        response = await call(cluster, "GET", "list_under_replicated_ledger", query=query)
        assert json.loads(response.body) == [5]
        query = {"missingreplica": "not an id"}
        response = await call(cluster, "GET", "list_under_replicated_ledger", query=query)
        assert response.status == 404


async def test_recover_heals_in_the_background(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 4, autorecovery=SLOW) as cluster:
        ids = await write_ledgers(cluster, 4)
        # A bookie some ledger names: with 4 ensembles of 3 out of 4 bookies, a given one is
        # in none of them once in 256 runs (the last one was, once, in CI).
        named = [(len(await naming(cluster, b)), b) for b in cluster.running_ids()]
        lost = max(named)[1]
        assert await naming(cluster, lost)
        response = await call(cluster, "PUT", "bookie", {"bookie_src": [lost]})
        assert response.status == 404  # still running: nothing to recover
        await cluster.stop_bookie(lost)
        cookie = cookie_node(cluster.store.ledgers_root, lost)
        await cluster.store.create(cookie, b"cookie", make_parents=True)
        bad_bodies: list[object] = [{"bookie_src": []}, {"bookie_src": "x:1"}, None]
        for bad in [*bad_bodies, {"bookie_src": ["a b"]}]:
            response = await call(cluster, "PUT", "bookie", bad)
            assert response.status == 404
        body = {"bookie_src": [lost], "delete_cookie": True}
        response = await call(cluster, "PUT", "bookie", body)
        assert (response.status, text(response)) == (200, "Success send recovery request command.")
        # The auditor's delay is an hour: only the route's background job can have healed it.
        await until(lambda: _healed(cluster, lost, cookie))
        async with BookKeeper(cluster.store) as bk:
            for lid in ids:
                handle = await bk.open_ledger(lid)
                assert len(await handle.read_entries(0, 9)) == 10


async def _healed(cluster: LocalCluster, bookie: str, cookie: str) -> bool:
    return not await naming(cluster, bookie) and await cluster.store.get(cookie) is None


async def test_decommission_waits_for_auto_recovery(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 4, autorecovery=FAST) as cluster:
        await write_ledgers(cluster, 4)
        lost = cluster.running_ids()[-1]
        response = await call(cluster, "PUT", "decommission", {"bookie_src": lost})
        assert response.status == 404
        assert f"bookie {lost} is still registered" in error(response)
        cookie = cookie_node(cluster.store.ledgers_root, lost)
        await cluster.store.create(cookie, b"cookie", make_parents=True)
        await cluster.stop_bookie(lost)
        response = await call(cluster, "PUT", "decommission", {"bookie_src": [lost]})
        assert response.status == 404
        response = await call(cluster, "PUT", "decommission", {"bookie_src": lost})
        expected = f"Success send decommission Bookie command {lost}"
        assert (response.status, text(response)) == (200, expected)
        await until(lambda: _healed(cluster, lost, cookie))
