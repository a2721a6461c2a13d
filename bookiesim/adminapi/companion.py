"""The companion that serves upstream's client-side admin routes beside a bookie."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.adminapi.bookie_info import add_bookie_info_route
from bookiesim.adminapi.ledger_read import add_ledger_read_route
from bookiesim.adminapi.sanity import add_sanity_route
from bookiesim.bookie.tls_connection import bookie_tls_settings
from bookiesim.client import BookKeeper, ClientConfig

if TYPE_CHECKING:
    from bookiesim.bookie.process import CompanionContext

__all__ = ["AdminApiCompanion"]


class AdminApiCompanion:
    """Routes ``/api/v1/ledger/read``, ``/api/v1/bookie/list_bookie_info`` and
    ``/api/v1/bookie/sanity`` with a client on the bookie's own store session (a companion of
    :class:`~bookiesim.bookie.process.BookieService`)."""

    name = "admin API client routes"

    async def serve(self, context: CompanionContext, *, task_status: trio.TaskStatus[None]) -> None:
        # With TLS, the client talks TLS with the bookie's keys, as the autorecovery's does.
        tls = bookie_tls_settings(context.cfg)
        config = ClientConfig(tls=tls) if tls.enabled else None
        async with BookKeeper(context.store, config=config) as client:
            add_ledger_read_route(context.router, client)
            add_bookie_info_route(context.router, client)
            add_sanity_route(context.router, client, context.bookie_id)
            task_status.started()
            await trio.sleep_forever()
