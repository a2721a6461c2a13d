"""A bookie restarted after a power loss left a ledger's index file empty.

Found by the lazy file system (docs/chaos.md): the checkpoint that first writes a ledger's
index file creates it, writes its header and locations, and fsyncs it before lastMark
moves. A power loss before that fsync leaves the file empty (or zeros)
while lastMark still points before the ledger's master-key record. The bookie used to refuse
to start (``not a BKLE index file``); now it removes the empty file with one WARNING
and the journal replay recreates the ledger, so every acknowledged entry reads back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie.index_format import HEADER_SIZE, index_path
from bookiesim.bookie.journal import last_mark_name, read_last_mark
from bookiesim.bookie.ledger_index import LedgerIndex
from bookiesim.client import BookKeeper
from bookiesim.client.digest import DigestType
from bookiesim.cluster.in_process import running_cluster
from tests.client.conftest import TEST_CONFIG

if TYPE_CHECKING:
    from pathlib import Path

PASSWORD = b"index"


@pytest.mark.parametrize("zeros", [0, 20, HEADER_SIZE])
def test_an_index_file_never_written_is_removed_at_scan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, zeros: int
) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(8, b"k")
    index.flush()
    index.close()
    short = index_path(tmp_path, 7)
    short.parent.mkdir(parents=True, exist_ok=True)
    short.write_bytes(bytes(zeros))
    with caplog.at_level(logging.WARNING, logger="bookiesim.bookie.ledger_index"):
        rescanned = LedgerIndex([tmp_path])
    assert not short.exists()
    assert not rescanned.exists(7)
    assert rescanned.ledger_ids() == [8]
    (warning,) = caplog.records
    assert str(short) in warning.getMessage()


async def test_the_journal_recreates_a_ledger_whose_index_lost_its_header(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_cluster(tmp_path / "cluster", 1) as cluster:
        (bookie_id,) = cluster.running_ids()
        cfg = cluster.service(bookie_id).cfg
        # The start's checkpoint wrote this mark; the bytes are kept to put back below
        # (the bookie's own writer never moves a mark backwards).
        (ledger_dir,) = cfg.ledger_directories
        mark_file = ledger_dir / "current" / last_mark_name()
        before = mark_file.read_bytes()
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as writer:
            lh = await writer.create_ledger(1, 1, 1, DigestType.CRC32C, PASSWORD)
            payloads = [b"entry-%d" % i for i in range(30)]
            for p in payloads:
                await lh.add_entry(p)
            ledger_id = lh.ledger_id
        await cluster.stop_bookie(bookie_id)

        # What a power loss during the stop's checkpoint leaves: the new index file's
        # writes never reached the disk, and neither did the new lastMark.
        path = index_path(ledger_dir, ledger_id)
        assert path.stat().st_size > HEADER_SIZE
        path.write_bytes(b"")
        mark_file.write_bytes(before)
        assert read_last_mark(cfg.ledger_directories).offset < 1024

        with caplog.at_level(logging.WARNING, logger="bookiesim.bookie.ledger_index"):
            await cluster.start_bookie(bookie_id)
        assert [r.getMessage().split(" holds nothing")[0] for r in caplog.records] == [
            f"index file {path}"
        ]
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as reader:
            handle = await reader.open_ledger(ledger_id, recovery=True)
            assert handle.metadata.last_entry_id == len(payloads) - 1
            entries = await handle.read_entries(0, len(payloads) - 1)
            assert [e.payload for e in entries] == payloads
