"""Where managed-ledger and cursor records live in the metadata store (upstream's
``MetaStoreImpl``, reference/pulsar.md §2.4).

* ``/managed-ledgers/<name>`` holds the ManagedLedgerInfo: a new managed ledger's node is
  created empty (an empty info), and every update writes the whole record with a
  compare-and-set on the node's version.
* ``/managed-ledgers/<name>/<cursor>`` holds a ManagedCursorInfo: created on first write,
  then compare-and-set.

Both kinds are compressed as configured (PIP-146) and read in either form. A record that
does not decode raises :class:`~bookiesim.mledger.compression.CorruptManagedInfoError`
naming the node, and nothing here ever writes over a record it could not read.
"""

from __future__ import annotations

from typing import Final

from bookiesim.metadata.errors import NodeExistsError, NoNodeError
from bookiesim.metadata.store import MetadataStore, join_path
from bookiesim.mledger.compression import (
    MetadataCompressionConfig,
    decode_cursor_info,
    decode_ledger_info,
    encode_cursor_info,
    encode_ledger_info,
)
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

__all__ = ["MANAGED_LEDGERS_ROOT", "MetaStore"]

MANAGED_LEDGERS_ROOT: Final = "/managed-ledgers"


class MetaStore:
    """Managed-ledger records on a :class:`~bookiesim.metadata.store.MetadataStore`."""

    def __init__(
        self,
        store: MetadataStore,
        ledger_info_compression: MetadataCompressionConfig | None = None,
        cursor_info_compression: MetadataCompressionConfig | None = None,
        root: str = MANAGED_LEDGERS_ROOT,
    ) -> None:
        self.store = store
        self.ledger_compression = ledger_info_compression or MetadataCompressionConfig()
        self.cursor_compression = cursor_info_compression or MetadataCompressionConfig()
        self.root = root

    def ledger_path(self, name: str) -> str:
        return join_path(self.root, name)

    def cursor_path(self, name: str, cursor: str) -> str:
        return join_path(self.ledger_path(name), cursor)

    async def get_ledger_info(
        self, name: str, *, create_if_missing: bool = True
    ) -> tuple[ml_pb.ManagedLedgerInfo, int] | None:
        """The managed ledger's info and node version; a missing node is created empty
        (``create_if_missing``) or gives None."""
        path = self.ledger_path(name)
        for _ in range(2):
            found = await self.store.get(path)
            if found is not None:
                info, _ = decode_ledger_info(found.value, path)
                return info, found.version
            if not create_if_missing:
                return None
            try:
                await self.store.create(path, b"", make_parents=True)
                return ml_pb.ManagedLedgerInfo(), 0
            except NodeExistsError:
                continue  # created by someone else in between (upstream #26247): read it
        raise NoNodeError(path, "created and deleted again while opening")

    async def put_ledger_info(self, name: str, info: ml_pb.ManagedLedgerInfo, version: int) -> int:
        """Compare-and-set the whole record; the new version. ``BadVersionError`` if someone
        else wrote it since ``version``."""
        data = encode_ledger_info(info, self.ledger_compression)
        return await self.store.set(self.ledger_path(name), data, version)

    async def get_cursor_info(
        self, name: str, cursor: str
    ) -> tuple[ml_pb.ManagedCursorInfo, int] | None:
        path = self.cursor_path(name, cursor)
        found = await self.store.get(path)
        if found is None:
            return None
        info, _ = decode_cursor_info(found.value, path)
        return info, found.version

    async def put_cursor_info(
        self, name: str, cursor: str, info: ml_pb.ManagedCursorInfo, version: int | None
    ) -> int:
        """Create (``version`` None) or compare-and-set the cursor's record."""
        path = self.cursor_path(name, cursor)
        data = encode_cursor_info(info, self.cursor_compression)
        if version is None:
            await self.store.create(path, data)
            return 0
        return await self.store.set(path, data, version)

    async def delete_cursor(self, name: str, cursor: str) -> None:
        await self.store.delete(self.cursor_path(name, cursor))

    async def cursors(self, name: str) -> list[str]:
        """The names of the managed ledger's cursors (children of its node)."""
        try:
            return await self.store.children(self.ledger_path(name))
        except NoNodeError:
            return []

    async def managed_ledgers(self) -> list[str]:
        """Names of the managed ledgers directly under the root (names without '/')."""
        try:
            return await self.store.children(self.root)
        except NoNodeError:
            return []
