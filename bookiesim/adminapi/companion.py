"""The companion that serves upstream's client-side admin routes beside a bookie."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.adminapi.bookie_info import add_bookie_info_route
from bookiesim.adminapi.ledger_read import add_ledger_read_route
from bookiesim.adminapi.sanity import add_sanity_route
from bookiesim.client import BookKeeper

if TYPE_CHECKING:
    from bookiesim.bookie.process import CompanionContext

__all__ = ["AdminApiCompanion"]


class AdminApiCompanion:
    """Routes ``/api/v1/ledger/read``, ``/api/v1/bookie/list_bookie_info`` and
    ``/api/v1/bookie/sanity`` with a client on the bookie's own store session (a companion of
    :class:`~bookiesim.bookie.process.BookieService`)."""

    name = "admin API client routes"

    async def serve(self, context: CompanionContext, *, task_status: trio.TaskStatus[None]) -> None:
        async with BookKeeper(context.store) as client:
            add_ledger_read_route(context.router, client)
            add_bookie_info_route(context.router, client)
            add_sanity_route(context.router, client, context.bookie_id)
            task_status.started()
            await trio.sleep_forever()
