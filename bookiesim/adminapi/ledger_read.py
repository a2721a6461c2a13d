"""``GET /api/v1/ledger/read``: a ledger's entries, as upstream's admin API reads them.

``?ledger_id=N`` (required: else 404), ``&start_entry_id=`` (default 0), ``&end_entry_id=``
(default -1: up to the last add confirmed), ``&page=P`` (from 1: entries ``1000 (P-1)`` to
``1000 (P-1) + 999``, narrowing the range given, and the answer also holds ``"Entries for
page: ": "P"``). The ledger is opened without recovery (a writer goes on undisturbed) and read
up to its last add confirmed. Answer: ``{"entry id": payload}``, each payload read as ASCII
(other bytes become U+FFFD), as upstream. A start past the end gets 500 with a line of text;
an id that is not a number, or a ledger that does not exist, 500 with an empty body, as
upstream's error service answers.

Served by :class:`~bookiesim.adminapi.companion.AdminApiCompanion`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    text_response,
)
from bookiesim.client.errors import BKError

if TYPE_CHECKING:
    from bookiesim.client import BookKeeper

__all__ = ["ENTRIES_PER_PAGE", "READ_PATH", "add_ledger_read_route", "page_range"]

log = logging.getLogger(__name__)

READ_PATH = "/api/v1/ledger/read"
ENTRIES_PER_PAGE = 1000


def page_range(start: int, end: int, page: int) -> tuple[int, int]:
    """``start..end`` (``end`` -1: open) narrowed to ``page`` as upstream narrows it: a start
    of 0 or before the page moves to the page's first entry, an open end or one past the page
    to its last."""
    if page <= 0:
        return start, end
    first = (page - 1) * ENTRIES_PER_PAGE
    last = first + ENTRIES_PER_PAGE - 1
    if start == 0 or start < first:
        start = first
    if end == -1 or end > last:
        end = last
    return start, end


def _failed() -> AdminResponse:
    return AdminResponse(500, "text/plain; charset=utf-8", b"")


class _ReadRoute:
    def __init__(self, client: BookKeeper) -> None:
        self.client = client

    async def read(self, request: AdminRequest) -> AdminResponse:
        query = request.query
        if "ledger_id" not in query:
            return text_response("give the ledger: ?ledger_id=N", 404)
        try:
            ledger_id = int(query["ledger_id"])
            start = int(query.get("start_entry_id", "0"))
            end = int(query.get("end_entry_id", "-1"))
            page = int(query.get("page", "-1"))
        except ValueError:
            return _failed()
        start, end = page_range(start, end, page)
        answer: dict[str, str] = {}
        if page > 0:
            answer["Entries for page: "] = str(page)
        if end != -1 and start > end:
            return text_response(
                f"start_entry_id {start} is past end_entry_id {end} (page {page})", 500
            )
        try:
            handle = await self.client.open_ledger(ledger_id)
            last = handle.last_add_confirmed if end == -1 else min(end, handle.last_add_confirmed)
            entries = await handle.read_entries(start, last) if start <= last else []
        except BKError as exc:
            log.warning("admin: reading ledger %d failed: %s", ledger_id, exc)
            return _failed()
        for entry in entries:
            answer[str(entry.entry_id)] = entry.payload.decode("ascii", errors="replace")
        return json_response(answer)


def add_ledger_read_route(router: AdminRouter, client: BookKeeper) -> None:
    router.add("GET", READ_PATH, _ReadRoute(client).read)
