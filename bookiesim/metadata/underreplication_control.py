"""The switches and the election of auto-recovery: what is not a mark or a lock.

Base of :class:`~.underreplication.UnderReplicationManager` (the module docstring there tells
the whole story); split off so that each file reads in one sitting. Upstream keeps these in
``ZkLedgerUnderreplicationManager`` (the layout, the ``disable`` flag,
``lostBookieRecoveryDelay``, ``checkallledgersctime``) and ``ZkLedgerAuditorManager`` (the
election):

* **Layout.** Every write first makes sure ``underreplication/`` holds ``LAYOUT``,
  ``ledgers/`` and ``locks/``, as constructing upstream's manager does, and refuses a
  ``LAYOUT`` other than ``BASIC`` version 1.
* **The flag.** Re-replication is paused while ``disable`` exists (upstream's
  ``autorecovery -disable``); workers wait in :meth:`UnderReplicationControl.wait_until_enabled`.
* **The delay.** ``lostBookieRecoveryDelay``: seconds the auditor waits after a bookie goes
  before marking its ledgers. An auditor initialises it from its configuration only where it
  is absent (the cluster's value wins); every write, even of the same value, wakes the
  auditor's watch, which is how upstream's ``triggeraudit`` asks for an audit now.
* **The election.** Each candidate writes an ephemeral sequential vote ``V_NNNNNNNNNN``; the
  lowest vote is the auditor, who copies its vote into the election node for people to read
  (``whoisauditor`` reads the lowest vote itself). A candidate that is not first watches and
  asks again when votes come or go; a vote whose session ended is gone, and its candidate
  must vote again.
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Generic, TypeVar

from bookiesim.metadata.errors import NodeExistsError, NoNodeError
from bookiesim.metadata.store import ANY_VERSION, MetadataStore, join_path, parent_path
from bookiesim.metadata.underreplication_format import (
    AUDITOR_ELECTION,
    CHECK_ALL_LEDGERS_CTIME,
    DISABLE,
    LAYOUT,
    LAYOUT_TYPE,
    LAYOUT_VERSION,
    LEDGERS,
    LOCKS,
    LOST_BOOKIE_RECOVERY_DELAY,
    VOTE_PREFIX,
    UnderReplicationFormatError,
    decode_check_all_ledgers_ctime,
    decode_layout,
    decode_recovery_delay,
    decode_vote,
    encode_check_all_ledgers_ctime,
    encode_layout,
    encode_recovery_delay,
    encode_vote,
    underreplication_path,
    vote_sequence,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from bookiesim.metadata.store import Change

__all__ = ["IncompatibleLayoutError", "UnderReplicationControl"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class IncompatibleLayoutError(UnderReplicationFormatError):
    """``underreplication/LAYOUT`` names a layout other than ``BASIC`` version 1."""


async def _nothing(_: Change) -> None:
    return None


class UnderReplicationControl:
    """The layout, the enable flag, ``lostBookieRecoveryDelay``, the auditor election and
    the last check of all ledgers, under ``<root>/underreplication`` of ``store``."""

    def __init__(self, store: MetadataStore, root: str | None = None) -> None:
        self._store = store
        self._root = root or store.ledgers_root
        self._base = underreplication_path(self._root)
        self._ledgers = join_path(self._base, LEDGERS)
        self._locks = join_path(self._base, LOCKS)
        self._election = join_path(self._base, AUDITOR_ELECTION)
        self._layout_checked = False

    @property
    def base_path(self) -> str:
        """``<ledgers root>/underreplication``."""
        return self._base

    # --- layout -------------------------------------------------------------------------

    async def ensure_layout(self) -> None:
        """Create ``underreplication/`` with ``LAYOUT``, ``ledgers/`` and ``locks/`` where
        missing; :class:`IncompatibleLayoutError` if ``LAYOUT`` names another layout."""
        await self._create_if_absent(self._base, make_parents=True)
        layout = join_path(self._base, LAYOUT)
        while True:
            node = await self._store.get(layout)
            if node is None:
                try:
                    await self._store.create(layout, encode_layout())
                    break
                except NodeExistsError:
                    continue  # another process wrote it first: check theirs
            found = decode_layout(node.value, layout)
            if found != (LAYOUT_TYPE, LAYOUT_VERSION):
                raise IncompatibleLayoutError(
                    f"{layout}: layout {found[0]}:{found[1]}, this manager reads only "
                    f"{LAYOUT_TYPE}:{LAYOUT_VERSION}"
                )
            break
        await self._create_if_absent(self._ledgers)
        await self._create_if_absent(self._locks)
        self._layout_checked = True

    async def _writable(self) -> None:
        if not self._layout_checked:
            await self.ensure_layout()

    async def _create_if_absent(
        self, path: str, value: bytes = b"", *, make_parents: bool = False
    ) -> bool:
        try:
            await self._store.create(path, value, make_parents=make_parents)
        except NodeExistsError:
            return False
        return True

    # --- the enable flag ----------------------------------------------------------------

    async def disable(self) -> bool:
        """Pause re-replication; False if it already was (upstream's shell says so)."""
        await self._writable()
        return await self._create_if_absent(join_path(self._base, DISABLE))

    async def enable(self) -> bool:
        """Resume re-replication; False if it was not paused."""
        try:
            await self._store.delete(join_path(self._base, DISABLE))
        except NoNodeError:
            return False
        return True

    async def is_enabled(self) -> bool:
        return await self._store.get(join_path(self._base, DISABLE)) is None

    async def wait_until_enabled(self) -> None:
        """Return once re-replication is enabled (at once if it is)."""
        async with self._store.watch(join_path(self._base, DISABLE)) as changes:
            async for change in changes:
                if not change.exists:
                    return

    # --- lostBookieRecoveryDelay ----------------------------------------------------------

    async def get_lost_bookie_recovery_delay(self) -> int | None:
        """Seconds, or None when the node was never written."""
        path = join_path(self._base, LOST_BOOKIE_RECOVERY_DELAY)
        node = await self._store.get(path)
        return None if node is None else decode_recovery_delay(node.value, path)

    async def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Write the delay (the same value again wakes the auditor's watch all the same)."""
        await self._put(LOST_BOOKIE_RECOVERY_DELAY, encode_recovery_delay(seconds))

    async def _put(self, name: str, value: bytes) -> None:
        """Write a node of ``underreplication/`` whatever it held, creating it if need be."""
        path = join_path(self._base, name)
        await self._writable()
        while True:
            try:
                await self._store.set(path, value, ANY_VERSION)
                return
            except NoNodeError:
                pass
            if await self._create_if_absent(path, value):
                return

    async def initialize_lost_bookie_recovery_delay(self, seconds: int) -> bool:
        """Write the delay unless the node exists (an auditor's start: the cluster's value
        wins over its configuration); True if written."""
        value = encode_recovery_delay(seconds)
        await self._writable()
        return await self._create_if_absent(
            join_path(self._base, LOST_BOOKIE_RECOVERY_DELAY), value
        )

    @asynccontextmanager
    async def watch_lost_bookie_recovery_delay(self) -> AsyncIterator[AsyncIterator[int | None]]:
        """The delay at once, then again on every write (even of the same value); None while
        the node is absent or unreadable (logged)."""
        path = join_path(self._base, LOST_BOOKIE_RECOVERY_DELAY)
        async with self._store.watch(path) as changes:
            yield _Mapped(changes, self._delay_after)

    async def _delay_after(self, change: Change) -> int | None:
        path = join_path(self._base, LOST_BOOKIE_RECOVERY_DELAY)
        node = await self._store.get(path) if change.exists else None
        try:
            return None if node is None else decode_recovery_delay(node.value, path)
        except UnderReplicationFormatError as exc:
            log.warning("%s", exc)
            return None

    # --- the auditor election -------------------------------------------------------------

    async def volunteer(self, bookie_id: str) -> str:
        """Enter the election: an ephemeral sequential vote; returns its path."""
        await self._writable()
        await self._create_if_absent(self._election)
        return await self._store.create(
            join_path(self._election, VOTE_PREFIX),
            encode_vote(bookie_id),
            ephemeral=True,
            sequential=True,
        )

    async def _votes(self) -> list[str]:
        try:
            names = await self._store.children(self._election)
        except NoNodeError:
            return []
        numbered = [(seq, name) for name in names if (seq := vote_sequence(name)) is not None]
        return [name for _, name in sorted(numbered)]

    async def elected(self, vote_path: str) -> bool:
        """Whether this vote is the lowest, i.e. its voter is the auditor; if so its vote is
        written into the election node, as upstream's elected auditor does. ``NoNodeError``
        if the vote is gone (its session expired): volunteer again."""
        votes = await self._votes()
        name = vote_path.rsplit("/", 1)[1]
        if parent_path(vote_path) != self._election or name not in votes:
            raise NoNodeError(vote_path, "auditor vote is gone (its session ended)")
        if votes[0] != name:
            return False
        vote = await self._store.get(vote_path)
        if vote is None:
            raise NoNodeError(vote_path, "auditor vote is gone (its session ended)")
        shown = await self._store.get(self._election)
        if shown is None or shown.value != vote.value:  # asked again: no churn
            await self._store.set(self._election, vote.value, ANY_VERSION)
        return True

    async def withdraw(self, vote_path: str) -> None:
        """Leave the election (an auditor stepping down); nothing if the vote is gone."""
        with contextlib.suppress(NoNodeError):
            await self._store.delete(vote_path)

    async def auditor(self) -> str | None:
        """The bookie id of the current auditor (the lowest vote), None if nobody votes."""
        while True:
            votes = await self._votes()
            if not votes:
                return None
            path = join_path(self._election, votes[0])
            node = await self._store.get(path)
            if node is not None:
                return decode_vote(node.value, path) or ""

    @asynccontextmanager
    async def watch_election(self) -> AsyncIterator[AsyncIterator[None]]:
        """Yields at once and whenever a vote comes or goes (not when the elected auditor
        writes its vote into the election node: that changes nobody's standing)."""
        async with self._store.watch(self._election) as changes:
            yield _Mapped(_VotesChanged(changes), _nothing)

    # --- the last check of all ledgers ------------------------------------------------------

    async def get_check_all_ledgers_ctime(self) -> int | None:
        path = join_path(self._base, CHECK_ALL_LEDGERS_CTIME)
        node = await self._store.get(path)
        return None if node is None else decode_check_all_ledgers_ctime(node.value, path)

    async def set_check_all_ledgers_ctime(self, ms: int) -> None:
        await self._put(CHECK_ALL_LEDGERS_CTIME, encode_check_all_ledgers_ctime(ms))


class _VotesChanged:
    """A watch's changes, less those that only changed the node's data."""

    def __init__(self, changes: AsyncIterator[Change]) -> None:
        self._changes = changes
        self._last: tuple[bool, int] | None = None

    def __aiter__(self) -> _VotesChanged:
        return self

    async def __anext__(self) -> Change:
        while True:
            change = await anext(self._changes)
            seen = (change.exists, change.children_version)
            if seen != self._last:
                self._last = seen
                return change


class _Mapped(Generic[_T]):
    """A watch's changes, each turned into what the caller wants to see."""

    def __init__(
        self, changes: AsyncIterator[Change], read: Callable[[Change], Awaitable[_T]]
    ) -> None:
        self._changes = changes
        self._read = read

    def __aiter__(self) -> _Mapped[_T]:
        return self

    async def __anext__(self) -> _T:
        return await self._read(await anext(self._changes))
