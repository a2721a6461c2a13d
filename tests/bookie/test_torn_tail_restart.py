"""A bookie restarted on a journal whose final write a power loss cut inside a record.

The journey of issue 33 item 8, over real sockets and files: a writer adds entries to a
one-replica ledger and dies; the bookie stops; the test leaves in its journal what a power
loss leaves of the next add's write (the length and a prefix of entry 20, the rest the
preallocated zeros), which no client ever had acknowledged. ``bookiesim shell readjournal``
calls that tail torn; the restarted bookie logs one WARNING naming the file and offset and
does not replay the entry; and the ledger's recovery then closes it with every
acknowledged entry (upstream, and bookiesim before, served the half-zero entry as the
ledger's last, the fencing read failed its digest, and the ledger stayed OPEN).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie.journal import (
    DataRecord,
    encode_record,
    journal_current_dir,
    journal_file_name,
    read_last_mark,
)
from bookiesim.client import BookKeeper
from bookiesim.client.digest import DigestManager, DigestType
from bookiesim.cluster.in_process import running_cluster
from bookiesim.metadata.ledgers import LedgerState
from tests.cli.shell_files import json_lines, run
from tests.client.conftest import TEST_CONFIG

if TYPE_CHECKING:
    from pathlib import Path

PASSWORD = b"torn"
ACKED = 20


def payload(entry_id: int) -> bytes:
    return b"entry-%d-" % entry_id + b"x" * 1000


def tear(path: str, offset: int, record: bytes, *, keep: int) -> None:
    """Write at ``offset`` what a power loss leaves of ``record``: ``keep`` bytes, then the
    preallocated zeros where the rest would have gone (and where its padding would)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(record[:keep] + bytes(len(record) - keep + 512))


@pytest.mark.parametrize("digest", [DigestType.CRC32C, DigestType.CRC32])
async def test_recovery_after_a_power_loss_tore_the_journal_tail(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    digest: DigestType,
) -> None:
    async with running_cluster(tmp_path / "cluster", 1) as cluster:
        (bookie_id,) = cluster.running_ids()
        cfg = cluster.service(bookie_id).cfg
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as writer:
            lh = await writer.create_ledger(1, 1, 1, digest, PASSWORD)
            for i in range(ACKED):
                await lh.add_entry(payload(i))
            ledger_id = lh.ledger_id
            length = lh.length
            # The writer dies here: the ledger stays OPEN.
        await cluster.stop_bookie(bookie_id)

        # The stop checkpointed: the journal's valid records end at the mark, where the
        # next write would have gone. Entry 20's write was cut there, 200 bytes in.
        mark = read_last_mark(cfg.ledger_directories)
        journal = os.path.join(
            journal_current_dir(cfg.effective_journal_directories[0]),
            journal_file_name(mark.file_id),
        )
        body = DigestManager(ledger_id, PASSWORD, digest).package(
            ACKED, ACKED - 1, length + len(payload(ACKED)), payload(ACKED)
        )
        tear(journal, mark.offset, encode_record(DataRecord.from_body(body)), keep=200)

        code, out, err = run(capsys, "readjournal", journal, "--json")
        assert (code, err) == (0, "")
        summary = json_lines(out)[-1]
        assert summary["torn"] is True
        assert summary["tornOffset"] == summary["endOffset"] == mark.offset
        assert summary["tornReason"] == (
            f"ledger {ledger_id} entry {ACKED}: {digest.name} digest mismatch over a "
            f"zero-filled tail"
        )
        assert (summary["droppedRecords"], summary["tailChecked"]) == (1, True)

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="bookiesim.bookie.journal"):
            await cluster.start_bookie(bookie_id)
        warnings = [r for r in caplog.records if r.name.startswith("bookiesim.bookie.journal")]
        assert len(warnings) == 1
        assert warnings[0].levelno == logging.WARNING
        message = warnings[0].getMessage()
        assert message.startswith(f"{journal}: torn journal tail at offset {mark.offset} (")
        assert "dropping 1 record(s)" in message

        async with BookKeeper(cluster.store, config=TEST_CONFIG) as reader:
            handle = await reader.open_ledger(ledger_id, recovery=True)
            assert handle.metadata.state is LedgerState.CLOSED
            assert handle.metadata.last_entry_id == ACKED - 1
            assert handle.metadata.length == length
            entries = await handle.read_entries(0, ACKED - 1)
            assert [e.payload for e in entries] == [payload(i) for i in range(ACKED)]
