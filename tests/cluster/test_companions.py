"""The bookie process's embedding hook: companions (auto-recovery, in practice) run beside
the bookie with its store session, its id, its admin routes and its metrics registry.

Why: the bookie layer must not import auto-recovery, yet ``autoRecoveryDaemonEnabled=true``
runs it in the bookie's process as upstream does; these tests hold the narrow seam between
the two (what a companion gets, when it starts, what its failure does).
"""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING

import pytest
import trio
from prometheus_client import Counter

from bookiesim.bookie.http_admin import AdminRequest, AdminResponse, json_response
from bookiesim.bookie.process import BookieService, CompanionContext
from bookiesim.cluster.testing import bookie_config
from bookiesim.metadata.registration import live_bookies

if TYPE_CHECKING:
    from pathlib import Path


class Recorder:
    """A companion that records what it was given and what it saw when it started."""

    name = "recorder"

    def __init__(self, *, fail_after: float | None = None) -> None:
        self.context: CompanionContext | None = None
        self.live_at_start: list[str] = []
        self.fail_after = fail_after
        self.cancelled = False

    async def serve(self, context: CompanionContext, *, task_status: trio.TaskStatus[None]) -> None:
        self.context = context
        self.live_at_start = sorted(await live_bookies(context.store))
        hits = Counter("companion_hits", "requests to the companion", registry=context.registry)

        async def hello(request: AdminRequest) -> AdminResponse:
            hits.inc()
            return json_response({"bookieId": context.bookie_id})

        context.router.add("GET", "/api/v1/companion", hello)
        task_status.started()
        try:
            if self.fail_after is not None:
                await trio.sleep(self.fail_after)
                raise RuntimeError("the companion broke")
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


async def test_a_companion_gets_the_store_id_routes_and_registry(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'meta.db'}"
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri)
    recorder = Recorder()
    service = BookieService(cfg, [recorder])
    async with trio.open_nursery() as nursery:
        address = await nursery.start(service.run)
        context = recorder.context
        assert context is not None
        assert context.bookie_id == address.bookie_id
        # The configuration it serves with: bookiePort=0 resolved to the port it bound.
        assert context.cfg == cfg.replace(bookie_port=address.bookie_port)
        # Started after the registration: what it does sees this bookie live.
        assert recorder.live_at_start == [address.bookie_id]
        base = f"http://127.0.0.1:{address.http_port}"
        answer = await trio.to_thread.run_sync(_get, f"{base}/api/v1/companion")
        assert json.loads(answer) == {"bookieId": address.bookie_id}
        metrics = (await trio.to_thread.run_sync(_get, f"{base}/metrics")).decode()
        assert "companion_hits_total 1.0" in metrics
        assert "bookie_server_status" in metrics  # one registry: the bookie's and its own
        nursery.cancel_scope.cancel()
    assert recorder.cancelled


async def test_a_failing_companion_stops_the_bookie(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'meta.db'}"
    service = BookieService(
        bookie_config(tmp_path / "b", metadata_service_uri=uri), [Recorder(fail_after=0.05)]
    )
    with (
        trio.fail_after(10),
        pytest.RaisesGroup(
            pytest.RaisesExc(RuntimeError, match="the companion broke"),
            flatten_subgroups=True,
            allow_unwrapped=True,
        ),
    ):
        await service.run()


def test_companions_need_a_metadata_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="recorder needs a metadata store: set metadataServiceUri"):
        BookieService(bookie_config(tmp_path), [Recorder()])
