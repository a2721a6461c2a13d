"""A full ledger disk, for real: bookie processes whose ledger directory is a small tmpfs.

Upstream's behaviour (LedgerDirsMonitor, BookieStateManager): every ledger disk above
``diskUsageThreshold`` turns the bookie read-only — adds answered EREADONLY, the registration
moved under ``available/readonly`` so that writers replace it and new ledgers avoid it, reads
still served — and it turns writable again once usage is below ``diskUsageLwmThreshold``. A
SIGTERM while the disk is full stops it cleanly (exit 0): its final checkpoint cannot write,
and the journal keeps every acknowledged entry for the next start.

Mounting needs root: elsewhere these tests skip, saying so, and under CI=true they fail.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.bookie import exit_codes
from bookiesim.client.bookie_connection import connect
from bookiesim.client.bookkeeper import BookKeeper
from bookiesim.client.digest import DigestManager, master_key
from bookiesim.cluster.probe import bookie_metrics
from bookiesim.cluster.processes import BOOKIE_PROGRAM, LocalBookie, bookie_process
from bookiesim.cluster.testing import BookieTestClient
from bookiesim.metadata import open_store
from bookiesim.metadata.registration import live_bookies, read_only_bookies
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame
from tests.mounts import mounted_tmpfs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from bookiesim.metadata.store import MetadataStore

MIB = 1 << 20
DISK = 16 * MIB
ENTRY = bytes(16 * 1024)
# Fast checks and checkpoints; full above 90 %, writable again below 70 %.
DISK_SETTINGS = (
    "diskCheckInterval=100",
    "flushInterval=200",
    "diskUsageThreshold=0.90",
    "diskUsageWarnThreshold=0.85",
    "diskUsageLwmThreshold=0.70",
)


def used_fraction(path: Path) -> float:
    st = os.statvfs(path)
    return 1.0 - st.f_bavail / st.f_blocks


def fill_to(disk: Path, fraction: float) -> Path:
    """A filler file that takes the disk to about ``fraction`` used."""
    filler = disk / "filler"
    missing = int((fraction - used_fraction(disk)) * DISK)
    with filler.open("ab") as f:
        f.write(bytes(max(0, missing)))
    return filler


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


async def await_for(condition: Callable[[], Any]) -> None:
    """Poll ``condition`` (a store lookup: no event to wait on) for up to 30 s."""
    with trio.fail_after(30):
        while not await condition():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def _moved(store: MetadataStore, bookie_id: str, *, to_read_only: bool) -> bool:
    """Registered on one side only: the move is over (its two steps are not atomic)."""
    read_only = bookie_id in await read_only_bookies(store)
    writable = bookie_id in await live_bookies(store)
    return read_only != writable and read_only == to_read_only


def server_status(bookie: LocalBookie) -> float:
    return bookie_metrics(bookie)[("bookie_server_status", ())]


async def add_status(bookie: LocalBookie, ledger_id: int, entry_id: int) -> int:
    """The v3 status of one add."""
    async with connect("127.0.0.1", bookie.bookie_port) as conn:
        response = await BookieTestClient(conn).add(ledger_id, entry_id, b"probe")
        return response.status


async def v2_add_code(bookie: LocalBookie, ledger_id: int, entry_id: int) -> int:
    """The v2 error code of one add, as it is on the wire."""
    body = DigestManager(ledger_id, b"").package(entry_id, -1, 5, b"probe")
    async with await trio.open_tcp_stream("127.0.0.1", bookie.bookie_port) as stream:
        await stream.send_all(encode_frame(v2.encode_add_request(master_key(b""), body)))
        decoder = FrameDecoder()
        while (frame := decoder.next_frame()) is NEED_DATA:
            decoder.receive_data(await stream.receive_some(1 << 16))
    response = v2.decode_response(frame)
    assert isinstance(response, v2.AddResponse)
    return response.error_code


def test_a_full_ledger_disk_turns_the_bookie_read_only_and_back(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/metadata.db"
    with mounted_tmpfs(tmp_path / "small", DISK) as disk, ExitStack() as bookies:

        def start(name: str, *extra: str) -> LocalBookie:
            root = tmp_path / name
            settings = (f"metadataServiceUri={uri}", "bookieAddress=127.0.0.1", *extra)
            return bookies.enter_context(bookie_process(root, *settings))

        full = start("full", f"ledgerDirectories={disk}", *DISK_SETTINGS)
        others = [start(f"b{n}") for n in range(2)]
        filler = fill_to(disk, 0.84)
        trio.run(_journey, uri, full, others, start, filler)
        for bookie in (full, *others):
            assert bookie.stop() == exit_codes.OK, bookie.log_tail()
        log = full.log_path.read_text()
        assert "Traceback" not in log
        assert "bookie is read-only: every ledger directory is full" in log
        assert "bookie is writable again" in log


async def _journey(
    uri: str,
    full: LocalBookie,
    others: list[LocalBookie],
    start: Callable[..., LocalBookie],
    filler: Path,
) -> None:
    full_id = f"127.0.0.1:{full.bookie_port}"
    async with open_store(uri) as store, BookKeeper(store) as bk:
        lh = await bk.create_ledger(3, 3, 2)
        assert full_id in lh.ensemble
        spare = start("spare")
        spare_id = f"127.0.0.1:{spare.bookie_port}"
        await await_for(lambda: _has(live_bookies(store), spare_id))
        # Write until the writer replaced the full bookie: its disk crossed the threshold,
        # its adds were answered EREADONLY, and the ensemble changed to the spare.
        written: list[bytes] = []
        with trio.fail_after(60):
            while full_id in lh.ensemble:
                payload = b"%d:" % len(written) + ENTRY
                await lh.add_entry(payload)
                written.append(payload)
        assert spare_id in lh.ensemble
        assert used_fraction(filler.parent) > 0.85
        # Read-only as upstream says it: registration (moved just after the bookie turned
        # read-only, maybe after the writer's replacement: the read-only entry first, then the
        # writable one removed, as upstream's registration manager does), admin API, metric,
        # answers.
        await await_for(lambda: _moved(store, full_id, to_read_only=True))
        assert get_json(full.state_url)["readOnly"] is True
        assert get_json(full.info_url)["state"] == "read_only"
        assert server_status(full) == 0
        assert await add_status(full, 7, 0) == pb.EREADONLY
        assert await v2_add_code(full, 7, 0) == 105  # v2.ErrorCode.EREADONLY, upstream's code
        # A new ledger never chooses it; what it holds is still read from it.
        other = await bk.create_ledger(3, 3, 2)
        assert full_id not in other.ensemble
        async with connect("127.0.0.1", full.bookie_port) as conn:
            read = await BookieTestClient(conn).read(lh.ledger_id, 0)
            assert read.status == pb.EOK
        await lh.close()
        reader = await bk.open_ledger(lh.ledger_id)
        entries = await reader.read_entries(0, len(written) - 1)
        assert [e.payload for e in entries] == written

        # Room again: below the low-water mark it is writable and registered as such.
        filler.unlink()
        await await_for(lambda: _moved(store, full_id, to_read_only=False))
        assert get_json(full.state_url)["readOnly"] is False
        assert server_status(full) == 1
        assert await add_status(full, 8, 0) == pb.EOK
        assert await v2_add_code(full, 8, 1) == v2.ErrorCode.EOK
        assert all(b.proc.poll() is None for b in (*others, spare))
        assert spare.stop() == exit_codes.OK


async def _has(snapshot: Any, bookie_id: str) -> bool:
    return bookie_id in await snapshot


def test_sigterm_on_a_full_disk_is_a_clean_stop_and_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "bookie"
    entries = 64
    with mounted_tmpfs(tmp_path / "small", DISK) as disk:
        # No checkpoint but the final one: the entries wait in the sorted table.
        settings = (f"ledgerDirectories={disk}", *DISK_SETTINGS, "flushInterval=3600000")
        with bookie_process(root, *settings) as bookie:
            trio.run(_add, bookie, range(entries), pb.EOK)
            fill_up(disk)
            wait_for("read-only", lambda: get_json(bookie.state_url)["readOnly"] is True)
            trio.run(_add, bookie, [entries], pb.EREADONLY)
            assert bookie.stop() == exit_codes.OK
        log = bookie.log_path.read_text()
        assert "Traceback" not in log
        assert "final checkpoint failed: no space left" in log
        (disk / "filler").unlink()
        with bookie_process(root, *settings) as bookie:
            trio.run(_reads_back, bookie, entries)  # replayed from the journal
            assert bookie.stop() == exit_codes.OK


def fill_up(disk: Path) -> None:
    """Grow the filler until the disk has no byte left."""
    with (disk / "filler").open("ab", buffering=0) as f:
        while True:
            try:
                f.write(bytes(64 * 1024))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return


async def _add(bookie: LocalBookie, entry_ids: Iterable[int], expected: int) -> None:
    async with connect("127.0.0.1", bookie.bookie_port) as conn:
        client = BookieTestClient(conn)
        for entry_id in entry_ids:
            assert (await client.add(1, entry_id, ENTRY)).status == expected, entry_id


async def _reads_back(bookie: LocalBookie, count: int) -> None:
    async with connect("127.0.0.1", bookie.bookie_port) as conn:
        client = BookieTestClient(conn)
        for entry_id in range(count):
            read = await client.read(1, entry_id)
            assert read.status == pb.EOK, entry_id


def test_all_disks_full_without_read_only_mode_stops_the_bookie(tmp_path: Path) -> None:
    # Upstream's readOnlyModeEnabled=false: shut down instead of turning read-only.
    with mounted_tmpfs(tmp_path / "small", DISK) as disk:
        fill_to(disk, 0.95)
        with bookie_process(
            tmp_path / "bookie",
            f"ledgerDirectories={disk}",
            *DISK_SETTINGS,
            "readOnlyModeEnabled=false",
        ) as bookie:
            assert bookie.proc.wait(timeout=30) == exit_codes.READ_ONLY_DISABLED
        log = bookie.log_path.read_text()
        assert "readOnlyModeEnabled=false: shutting down" in log
        assert "Traceback" not in log


def test_an_unwritable_ledger_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "ro", MIB, read_only=True) as disk:
        done = subprocess.run(
            [
                *BOOKIE_PROGRAM,
                *("--set", "bookiePort=0", "--set", "httpServerPort=0"),
                *("--set", f"journalDirectory={tmp_path / 'journal'}"),
                *("--set", f"ledgerDirectories={disk}"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == exit_codes.UNUSABLE_DIRECTORY
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert errors == [errors[0]]
    assert f"ledger directory {disk} is not writable: Read-only file system" in errors[0]
    assert "Traceback" not in done.stderr
