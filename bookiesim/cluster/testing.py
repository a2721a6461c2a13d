"""Helpers to run bookies in-process, for tests and experiments (like ``trio.testing``).

::

    async with running_bookie(bookie_config(tmp_path)) as service:
        async with bookie_client(service) as client:
            await client.add(ledger_id=1, entry_id=0, payload=b"hello")

Everything listens on 127.0.0.1 with free ports; directories live under the given path.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.config import BookieConfig
from bookiesim.bookie.process import BookieService
from bookiesim.bookie.sorted_storage import SortedLedgerStorage
from bookiesim.client.bookie_connection import BookieConnection, connect
from bookiesim.client.digest import DigestManager, DigestType, master_key
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator
    from pathlib import Path


def bookie_config(root: Path, **overrides: object) -> BookieConfig:
    """A config for a test bookie under ``root``: free ports, small journal preallocation."""
    base = BookieConfig.from_mapping(
        {
            "bookiePort": 0,
            "httpServerPort": 0,
            "journalDirectory": str(root / "journal"),
            "ledgerDirectories": str(root / "ledgers"),
            "journalPreAllocSizeMB": 1,
        }
    )
    return base.replace(**overrides) if overrides else base


async def write_out_table(service: BookieService) -> None:
    """Write the sorted storage's table to the entry logs now, as its flush at
    ``skipListSizeLimit`` would; nothing to do for the interleaved storage, whose adds are in
    their logs already."""
    storage = service.bookie.storage
    if isinstance(storage, SortedLedgerStorage):
        await storage.flush(everything=True)


@asynccontextmanager
async def running_bookie(cfg: BookieConfig) -> AsyncIterator[BookieService]:
    """Run a bookie for the duration of the block; leaving it stops the bookie cleanly."""
    service = BookieService(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        try:
            yield service
        finally:
            nursery.cancel_scope.cancel()


class BookieTestClient:
    """A v3 connection plus entry packaging: the smallest client a test needs."""

    def __init__(
        self,
        conn: BookieConnection,
        password: bytes = b"",
        digest_type: DigestType = DigestType.CRC32C,
    ) -> None:
        self.conn = conn
        self.password = password
        self.digest_type = digest_type
        self.key = master_key(password)
        self._lengths: dict[int, int] = {}

    def digest(self, ledger_id: int) -> DigestManager:
        return DigestManager(ledger_id, self.password, self.digest_type)

    def request(self, operation: pb.OperationType.ValueType, **fields: object) -> pb.Request:
        header = self.conn.header(operation, self.conn.next_txn_id())
        return pb.Request(header=header, **fields)  # type: ignore[arg-type]

    async def add(
        self,
        ledger_id: int,
        entry_id: int,
        payload: bytes,
        *,
        lac: int = -1,
        key: bytes | None = None,
        recovery: bool = False,
        write_flags: int | None = None,
        length: int | None = None,
        priority: int | None = None,
    ) -> pb.Response:
        """Add one entry; ``length`` is the ledger's total length including this payload
        (defaults to the sum of payloads this client has added to the ledger); ``priority``
        sets the header's (upstream's recovery and re-replication send 100)."""
        if length is None:
            length = self._lengths.get(ledger_id, 0) + len(payload)
        self._lengths[ledger_id] = length
        body = self.digest(ledger_id).package(entry_id, lac, length, payload)
        add = pb.AddRequest(
            ledgerId=ledger_id,
            entryId=entry_id,
            masterKey=self.key if key is None else key,
            body=body,
        )
        if recovery:
            add.flag = pb.AddRequest.RECOVERY_ADD
        if write_flags is not None:
            add.writeFlags = write_flags
        request = self.request(pb.ADD_ENTRY, addRequest=add)
        if priority is not None:
            request.header.priority = priority
        return await self.conn.call(request)

    async def read(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        key: bytes | None = None,
        previous_lac: int | None = None,
        timeout_ms: int | None = None,
        piggyback: bool = False,
    ) -> pb.Response:
        read = pb.ReadRequest(ledgerId=ledger_id, entryId=entry_id)
        if fence:
            read.flag = pb.ReadRequest.FENCE_LEDGER
            read.masterKey = self.key if key is None else key
        elif piggyback:
            read.flag = pb.ReadRequest.ENTRY_PIGGYBACK
        if previous_lac is not None:
            read.previousLAC = previous_lac
        if timeout_ms is not None:
            read.timeOut = timeout_ms
        return await self.conn.call(self.request(pb.READ_ENTRY, readRequest=read))

    async def write_close(self, ledger_id: int, key: bytes | None = None) -> pb.Response:
        wc = pb.WriteCloseRequest(ledgerId=ledger_id, masterKey=self.key if key is None else key)
        return await self.conn.call(self.request(pb.WRITE_CLOSE, writeCloseRequest=wc))


@asynccontextmanager
async def bookie_client(
    service: BookieService, password: bytes = b"", *, tls: ssl.SSLContext | None = None
) -> AsyncIterator[BookieTestClient]:
    """A test client on ``service``; with ``tls``, over TLS after START_TLS."""
    address = service.address
    assert address is not None, "bookie is not serving yet"
    async with connect(address.host, address.bookie_port, tls=tls) as conn:
        yield BookieTestClient(conn, password)
