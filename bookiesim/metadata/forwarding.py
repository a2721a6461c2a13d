"""A metadata store that hands every call to another one: the base for stores that watch or
bend a few calls (recording writes in the simulation, injecting races in tests) and leave
the rest alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.metadata.store import (
    ANY_VERSION,
    Change,
    MetadataStore,
    Versioned,
    store_change_number,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

__all__ = ["ForwardingStore"]


class ForwardingStore:
    """Every :class:`~bookiesim.metadata.store.MetadataStore` call goes to ``inner``;
    subclasses override what they change."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner

    @property
    def uri(self) -> str:
        return self.inner.uri

    @property
    def ledgers_root(self) -> str:
        return self.inner.ledgers_root

    @property
    def session_id(self) -> int:
        return self.inner.session_id

    async def get(self, path: str) -> Versioned | None:
        return await self.inner.get(path)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        return await self.inner.create(
            path, value, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        return await self.inner.set(path, value, expected_version)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self.inner.delete(path, expected_version)

    async def children(self, path: str) -> list[str]:
        return await self.inner.children(path)

    def watch(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[Change]]:
        return self.inner.watch(path)

    def change_number(self) -> int | None:
        """The inner store's change number (see ``MemoryStore.change_number``), None if it
        has none. Safe to forward: every change made through this store reaches ``inner``."""
        return store_change_number(self.inner)

    async def close(self) -> None:
        await self.inner.close()
