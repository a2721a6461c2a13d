"""The auditor election: volunteer, and run the auditor's term while elected.

Theory of operation
-------------------
Upstream's ``AuditorElector`` on the records of :mod:`bookiesim.metadata.underreplication`:
each candidate writes an ephemeral sequential vote under ``underreplication/auditorelection``
and the lowest vote is the auditor (it also writes its vote into the election node, for
``whoisauditor`` readers of upstream's kind). Every candidate watches the election; a change
of the votes makes it ask again whether it is elected. So when the auditor's vote goes — its
service stopped and withdrew it, or its session ended and took it along — the next candidate
takes over at once, or within the session timeout for a process that died.

A candidate whose own vote vanished (its session expired and the store reconnected on a new
one) ends its term if it had one and volunteers again, at the end of the line. A term is
started only once the previous one has wound down, so one service never audits twice at once.
Ids need not be unique: two candidates with one id are told apart by their votes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata.errors import MetadataError, NoNodeError
from bookiesim.metadata.store import parent_path

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bookiesim.metadata.store import MetadataStore
    from bookiesim.metadata.underreplication import UnderReplicationManager

__all__ = ["AuditorElector"]

log = logging.getLogger(__name__)

_WITHDRAW_TIMEOUT = 5.0
"""Longest a stopping candidate tries to withdraw its vote (its session would take it later)."""


class AuditorElector:
    """One candidate ``bookie_id`` in the election kept by ``urm`` on ``store``."""

    def __init__(self, store: MetadataStore, urm: UnderReplicationManager, bookie_id: str) -> None:
        self._store = store
        self._urm = urm
        self.bookie_id = bookie_id
        self.vote: str | None = None
        """The path of this candidate's vote while it has one."""

    async def run(
        self,
        term: Callable[[], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Volunteer (then ``started``), and run ``term()`` whenever elected, cancelling it when
        no longer; until cancelled, when the vote is withdrawn."""
        duties: trio.CancelScope | None = None
        stopped = trio.Event()
        stopped.set()
        votes: list[str] | None = None
        try:
            async with self._urm.watch_election() as changes, trio.open_nursery() as nursery:
                vote = self.vote = await self._urm.volunteer(self.bookie_id)
                log.info("auto-recovery %s volunteered as auditor (%s)", self.bookie_id, vote)
                task_status.started()
                async for _ in changes:
                    try:
                        # Only a change of the votes can change who is elected; the election
                        # node's own data changes when an auditor writes its vote there.
                        now = await self._store.children(parent_path(vote))
                        if now == votes:
                            continue
                        votes = now
                        elected = await self._urm.elected(vote)
                    except NoNodeError:
                        elected, votes = False, None
                        if duties is not None:
                            duties.cancel()
                        vote = self.vote = await self._urm.volunteer(self.bookie_id)
                        log.warning("auditor vote of %s was lost; voted again", self.bookie_id)
                    except MetadataError as exc:
                        log.warning("auditor election: %s", exc)
                        votes = None
                        continue
                    if elected and (duties is None or duties.cancel_called):
                        await stopped.wait()  # the previous term has wound down
                        duties, stopped = trio.CancelScope(), trio.Event()
                        nursery.start_soon(_term, term, duties, stopped)
                    elif not elected and duties is not None:
                        duties.cancel()
        finally:
            await self._withdraw()

    async def _withdraw(self) -> None:
        vote, self.vote = self.vote, None
        if vote is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(_WITHDRAW_TIMEOUT):
            try:
                await self._urm.withdraw(vote)
            except MetadataError as exc:
                log.warning("auditor vote %s not withdrawn: %s", vote, exc)


async def _term(
    term: Callable[[], Awaitable[None]], scope: trio.CancelScope, stopped: trio.Event
) -> None:
    try:
        with scope:
            await term()
    finally:
        stopped.set()
