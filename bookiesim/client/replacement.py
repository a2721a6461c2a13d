"""Which bookies replace the failed ones of a writer's ensemble (upstream's placement
policy's ``replaceBookie``, with the backoff of :mod:`.failed_bookies`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.client.errors import NotEnoughBookiesError, read_only_note

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client.context import ClientContext
    from bookiesim.client.errors import BKError
    from bookiesim.client.failed_bookies import FailedBookies

__all__ = ["replacement_ensemble"]

log = logging.getLogger(__name__)


async def replacement_ensemble(
    ctx: ClientContext,
    ledger_id: int,
    ensemble: tuple[str, ...],
    failed: dict[int, str],
    bad: FailedBookies,
    stopped: Callable[[], BKError | None],
) -> tuple[str, ...]:
    """``ensemble`` with replacements for the ``failed`` positions: live bookies outside the
    ensemble, those that never failed this handle first. When they are too few, bookies that
    did fail it are reused (they may be back, restarted), each once its backoff has passed
    (:mod:`.failed_bookies`); the change waits for them rather than flip at once between
    bookies that keep failing, a metadata write per flip. Bookies that failed again after
    the longest backoff are not waited for: with none left, NotEnoughBookies. ``stopped``
    tells, after a wait, whether the handle failed meanwhile (its error is raised)."""
    needed = len(failed)
    current = set(ensemble)
    while True:
        live = await ctx.live_bookies()
        spare = [b for b in live if b not in current]
        candidates = sorted(b for b in spare if b not in bad)
        retry = [b for b in spare if b in bad and not bad.exhausted(b)]
        if len(candidates) + len(retry) < needed:
            given_up = sorted(b for b in spare if bad.exhausted(b))
            raise NotEnoughBookiesError(
                f"cannot replace {sorted(failed.values())}: {len(spare)} spare live "
                f"bookies ({sorted(spare)}), {needed} needed"
                + (f"; {given_up} kept failing this handle" if given_up else "")
                + read_only_note(await ctx.read_only_bookies()),
                ledger_id=ledger_id,
            )
        if len(candidates) < needed:
            now = trio.current_time()
            due = sorted(retry, key=lambda b: (bad.due_at(b), b))
            wake = bad.due_at(due[needed - len(candidates) - 1])
            if wake > now:
                log.info(
                    "ledger %d: every spare bookie failed this handle; the next may be "
                    "retried in %.3f s",
                    ledger_id,
                    wake - now,
                )
                await trio.sleep_until(wake)
                error = stopped()
                if error is not None:
                    raise error
                continue  # the live bookies may have changed meanwhile
            due_now = sorted(b for b in retry if bad.due_at(b) <= now)
            chosen = candidates + ctx.rng.sample(due_now, needed - len(candidates))
        else:
            chosen = ctx.rng.sample(candidates, needed)
        replaced = list(ensemble)
        for position, bookie in zip(sorted(failed), chosen, strict=True):
            replaced[position] = bookie
        return tuple(replaced)
