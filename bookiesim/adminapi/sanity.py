"""``GET /api/v1/bookie/sanity``: upstream's bookie sanity test over HTTP.

A ledger of one entry copy on this bookie alone (E=1, Qw=1, Qa=1, digest MAC, an empty
password), ten entries ``entry-0`` .. ``entry-9`` written, the ledger closed, opened again
(its last entry must be 9), read back and compared, then deleted, each step within
:data:`STEP_TIMEOUT` seconds. Answer: ``{"passed": bool, "readOnly": bool}``; ``readOnly``
is upstream's ``forceReadOnlyBookie``, which bookiesim has not, so it is false (a bookie
read-only for lack of space fails the test: it takes no adds). One test runs at a time, as
upstream's; another request waits for it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.http_admin import AdminRequest, AdminResponse, AdminRouter, json_response
from bookiesim.client.errors import BKError
from bookiesim.client.ledger_handle import LedgerHandle
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.ledgers import DigestType, LedgerMetadata

if TYPE_CHECKING:
    from bookiesim.client import BookKeeper

__all__ = ["ENTRIES", "SANITY_PATH", "STEP_TIMEOUT", "add_sanity_route", "sanity_test"]

log = logging.getLogger(__name__)

SANITY_PATH = "/api/v1/bookie/sanity"
ENTRIES = 10
STEP_TIMEOUT = 1.0
"""Seconds for each step (upstream's add and read timeouts of its sanity test)."""


async def sanity_test(client: BookKeeper, bookie_id: str) -> bool:
    """Write, read back and delete a ledger on ``bookie_id`` alone; whether all went right
    (what went wrong is logged)."""
    metadata = LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles={0: (bookie_id,)},
        digest_type=DigestType.HMAC,
        ctime=int(time.time() * 1000),
    )
    ledger_id: int | None = None
    try:
        with trio.fail_after(STEP_TIMEOUT):
            ledger_id = await client.ledger_manager.create(metadata)
        writer = LedgerHandle(client, ledger_id, metadata, 0)
        with trio.fail_after(STEP_TIMEOUT):
            for n in range(ENTRIES):
                await writer.add_entry(f"entry-{n}".encode())
            await writer.close()
        with trio.fail_after(STEP_TIMEOUT):
            reader = await client.open_ledger(ledger_id, password=b"")
            if reader.last_add_confirmed != ENTRIES - 1:
                log.warning("sanity: ledger %d ends at %d", ledger_id, reader.last_add_confirmed)
                return False
            entries = await reader.read_entries(0, ENTRIES - 1)
        expected = [f"entry-{n}".encode() for n in range(ENTRIES)]
        if [e.payload for e in entries] != expected:
            log.warning("sanity: ledger %d read back other entries than written", ledger_id)
            return False
        return True
    except (BKError, MetadataError, trio.TooSlowError) as exc:
        log.warning("sanity test on %s failed: %r", bookie_id, exc)
        return False
    finally:
        if ledger_id is not None:
            with trio.move_on_after(STEP_TIMEOUT):
                try:
                    await client.delete_ledger(ledger_id)
                except BKError as exc:
                    log.info("sanity: could not delete ledger %d: %s", ledger_id, exc)


def add_sanity_route(router: AdminRouter, client: BookKeeper, bookie_id: str) -> None:
    one_at_a_time = trio.Lock()

    async def sanity(request: AdminRequest) -> AdminResponse:
        async with one_at_a_time:
            passed = await sanity_test(client, bookie_id)
        return json_response({"passed": passed, "readOnly": False})

    router.add("GET", SANITY_PATH, sanity)
