"""The transport floor of ``bench bookie``: the bookie's server and group wait, no storage."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from bookiesim.bench.bookie import transport_floor_process
from bookiesim.bench.transport_floor import NoStorageProcessor, main
from bookiesim.bookie.server import BookieServer
from bookiesim.client.bookie_connection import connect
from bookiesim.cluster.testing import BookieTestClient
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    import pytest


@asynccontextmanager
async def floor_client(
    max_group_wait: float, *, flush_when_queue_empty: bool = False
) -> AsyncIterator[tuple[BookieTestClient, NoStorageProcessor]]:
    processor = NoStorageProcessor(max_group_wait, flush_when_queue_empty=flush_when_queue_empty)
    server = BookieServer(processor, max_frame_size=5 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.run)
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        async with connect("127.0.0.1", port) as conn:
            yield BookieTestClient(conn), processor
        nursery.cancel_scope.cancel()


async def test_pipelined_adds_are_answered_together_once_the_group_wait_is_over() -> None:
    async with floor_client(0.2) as (client, processor):
        answers: dict[tuple[int, int], pb.Response] = {}

        async def add(ledger_id: int, entry_id: int) -> None:
            answers[ledger_id, entry_id] = await client.add(ledger_id, entry_id, b"x" * 100)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(add, 1 + n % 4, n // 4)
        waited = time.perf_counter() - started
    assert waited >= 0.2  # the oldest add waited the whole group wait
    assert processor.groups == 1
    assert sorted(answers) == sorted((1 + n % 4, n // 4) for n in range(20))
    for (ledger_id, entry_id), response in answers.items():
        assert response.status == pb.EOK
        assert response.addResponse.ledgerId == ledger_id
        assert response.addResponse.entryId == entry_id


async def test_flush_when_queue_empty_answers_without_the_group_wait() -> None:
    async with floor_client(5.0, flush_when_queue_empty=True) as (client, processor):
        started = time.perf_counter()
        response = await client.add(7, 0, b"payload")
        assert time.perf_counter() - started < 5.0
    assert response.status == pb.EOK
    assert processor.groups == 1


async def test_anything_but_an_add_gets_ebadreq() -> None:
    async with floor_client(0.0) as (client, _):
        response = await client.read(1, 0)
    assert response.status == pb.EBADREQ
    assert response.header.operation == pb.READ_ENTRY


def test_the_floor_process_announces_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    async def one_add(port: int) -> pb.Response:
        async with connect("127.0.0.1", port) as conn:
            return await BookieTestClient(conn).add(3, 0, b"hello")

    with transport_floor_process(tmp_path, "journalMaxGroupWaitMSec=1") as (port, pid):
        assert pid > 0
        response = trio.run(one_add, port)
    assert response.status == pb.EOK
    assert response.addResponse.ledgerId == 3


def test_an_unknown_setting_is_named_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "journalMaxGroupWait=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transport floor: ")
    assert "unknown key 'journalMaxGroupWait'" in err
    assert "journalMaxGroupWaitMSec" in err  # the suggestion
