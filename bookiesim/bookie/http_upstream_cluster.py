"""Upstream's admin routes about the cluster, answered from the metadata store the bookie
registered in (routed only when the bookie has a ``metadataServiceUri``).

==========================================  =================================================
``GET /api/v1/bookie/list_bookies``         ``?type=rw|ro`` (rw unless ``ro``),
                                            ``?print_hostnames=true``: ``{"bookie id":
                                            "host" or null}``
``GET /api/v1/bookie/cluster_info``        ``auditorElected``, ``auditorId`` ("" when none),
                                            ``clusterUnderReplicated`` (any ledger marked),
                                            ``ledgerReplicationEnabled``, and the bookies:
                                            ``totalBookiesCount`` (those with a cookie, as
                                            upstream counts them), ``writableBookiesCount``,
                                            ``readonlyBookiesCount``,
                                            ``unavailableBookiesCount`` (the rest)
``GET /api/v1/ledger/list``                 ``{"ledger id": null}`` for every ledger, oldest
                                            first; ``?print_metadata=true`` gives each
                                            ledger's stored metadata as a string instead of
                                            null (``&decode_meta=true``: as the object
                                            ``/ledger/metadata`` answers), ``&page=N`` (from
                                            1) only the Nth page of them
``GET /api/v1/ledger/metadata``             ``?ledger_id=N``: ``{"N": {...}}``, the ledger's
                                            metadata with upstream's field names (below); 404
                                            without ``ledger_id``
``DELETE /api/v1/ledger/delete``            ``?ledger_id=N``: delete the ledger's metadata
                                            (the bookies' GC reclaims its data); the JSON
                                            string ``"Deleted ledger: N"``; 404 without
                                            ``ledger_id``
==========================================  =================================================

The metadata object, as upstream's JSON mapper writes its metadata class: ``ledgerId``,
``metadataFormatVersion``, ``ensembleSize``, ``writeQuorumSize``, ``ackQuorumSize``,
``state`` (``OPEN``, ``IN_RECOVERY``, ``CLOSED``), ``length``, ``lastEntryId``, ``ctime``
(-1 when not stored), ``closed``, ``allEnsembles`` (first entry id to a list of ``{"id":
bookie id}``), ``digestType`` (``CRC32``, ``MAC``, ``CRC32C``, ``DUMMY``), ``password`` and
``customMetadata``'s values (base64), ``ctoken``.

Pages are upstream's: a ledger's 1-based position ``i`` is on page ``N`` when
``100 (N-1) <= i <= 100 (N-1) + 99``, so page 1 holds 99 ledgers and later pages 100; a
script that walks pages until one is empty sees every ledger once. A ``page``
or ``ledger_id`` that is not a number, or a ledger that does not exist, gets 500 with an
empty body, as upstream's error service answers.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    text_response,
)
from bookiesim.metadata.errors import MetadataError, NoNodeError
from bookiesim.metadata.ledgers import DigestType, LedgerManager, LedgerMetadata, LedgerState
from bookiesim.metadata.registration import live_bookies, read_only_bookies
from bookiesim.metadata.store import join_path
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from bookiesim.metadata.store import MetadataStore

__all__ = ["LEDGERS_PER_PAGE", "add_upstream_cluster_routes", "metadata_json", "on_page"]

LEDGERS_PER_PAGE = 100
# The metadata format bookiesim writes (LedgerMetadata.to_bytes), upstream's current one.
_METADATA_FORMAT_VERSION = 3
# Upstream's client API names HMAC "MAC".
_DIGEST_NAMES = {DigestType.HMAC: "MAC"}


def _failed() -> AdminResponse:
    # Upstream's answer when its service throws: 500, no body.
    return AdminResponse(500, "text/plain; charset=utf-8", b"")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def metadata_json(ledger_id: int, metadata: LedgerMetadata) -> dict[str, Any]:
    """``metadata`` with the field names and value forms of upstream's JSON (module doc)."""
    return {
        "ledgerId": ledger_id,
        "metadataFormatVersion": _METADATA_FORMAT_VERSION,
        "ensembleSize": metadata.ensemble_size,
        "writeQuorumSize": metadata.write_quorum_size,
        "ackQuorumSize": metadata.ack_quorum_size,
        "state": metadata.state.name,
        "length": metadata.length,
        "lastEntryId": metadata.last_entry_id,
        "ctime": -1 if metadata.ctime is None else metadata.ctime,
        "closed": metadata.state is LedgerState.CLOSED,
        "allEnsembles": {
            str(first): [{"id": bookie} for bookie in bookies]
            for first, bookies in metadata.ensembles.items()
        },
        "digestType": _DIGEST_NAMES.get(metadata.digest_type, metadata.digest_type.name),
        "password": _b64(metadata.password),
        "customMetadata": {k: _b64(v) for k, v in metadata.custom_metadata.items()},
        "ctoken": metadata.c_token,
    }


def on_page(position: int, page: int) -> bool:
    """Whether the ``position``-th ledger (from 1) is on ``page`` (from 1; below 1: all)."""
    if page <= 0:
        return True
    first = (page - 1) * LEDGERS_PER_PAGE
    return first <= position <= first + LEDGERS_PER_PAGE - 1


class _ClusterRoutes:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.ledgers = LedgerManager(store)

    async def list_bookies(self, request: AdminRequest) -> AdminResponse:
        read_only = request.query.get("type") == "ro"
        hostnames = request.query.get("print_hostnames") == "true"
        found = await (read_only_bookies if read_only else live_bookies)(self.store)
        return json_response(
            {bookie_id: info.host if hostnames else None for bookie_id, info in found.items()}
        )

    async def cluster_info(self, request: AdminRequest) -> AdminResponse:
        urm = UnderReplicationManager(self.store)
        auditor = await urm.auditor()
        try:
            # Upstream counts every bookie that has a cookie: those ever formatted here.
            known = len(await self.store.children(join_path(self.store.ledgers_root, "cookies")))
        except NoNodeError:
            known = 0
        writable = len(await live_bookies(self.store))
        read_only = len(await read_only_bookies(self.store))
        return json_response(
            {
                "auditorElected": auditor is not None,
                "auditorId": auditor or "",
                "clusterUnderReplicated": await urm.count() > 0,
                "ledgerReplicationEnabled": await urm.is_enabled(),
                "totalBookiesCount": known,
                "writableBookiesCount": writable,
                "readonlyBookiesCount": read_only,
                "unavailableBookiesCount": known - writable - read_only,
            }
        )

    async def list_ledgers(self, request: AdminRequest) -> AdminResponse:
        with_metadata = request.query.get("print_metadata") == "true"
        decoded = request.query.get("decode_meta") == "true"
        page = -1
        if with_metadata and "page" in request.query:
            try:
                page = int(request.query["page"])
            except ValueError:
                return _failed()
        ledger_ids = await self.ledgers.list_ledgers()
        answer: dict[str, str | dict[str, Any] | None] = {}
        for position, ledger_id in enumerate(ledger_ids, start=1):
            if not with_metadata:
                answer[str(ledger_id)] = None
            elif on_page(position, page):
                metadata, _version = await self.ledgers.read(ledger_id)
                if decoded:
                    answer[str(ledger_id)] = metadata_json(ledger_id, metadata)
                else:
                    # As upstream: the stored bytes read as UTF-8 (binary parts replaced).
                    answer[str(ledger_id)] = metadata.to_bytes().decode("utf-8", errors="replace")
        return json_response(answer)

    async def ledger_metadata(self, request: AdminRequest) -> AdminResponse:
        if "ledger_id" not in request.query:
            return text_response("give the ledger: ?ledger_id=N", 404)
        try:
            ledger_id = int(request.query["ledger_id"])
            metadata, _version = await self.ledgers.read(ledger_id)
        except (ValueError, MetadataError):
            return _failed()
        return json_response({str(ledger_id): metadata_json(ledger_id, metadata)})

    async def delete_ledger(self, request: AdminRequest) -> AdminResponse:
        if "ledger_id" not in request.query:
            return text_response("give the ledger: ?ledger_id=N", 404)
        try:
            ledger_id = int(request.query["ledger_id"])
            await self.ledgers.delete(ledger_id)
        except (ValueError, MetadataError):
            return _failed()
        return json_response(f"Deleted ledger: {ledger_id}")


def add_upstream_cluster_routes(router: AdminRouter, store: MetadataStore) -> None:
    routes = _ClusterRoutes(store)
    router.add("GET", "/api/v1/bookie/list_bookies", routes.list_bookies)
    router.add("GET", "/api/v1/bookie/cluster_info", routes.cluster_info)
    router.add("GET", "/api/v1/ledger/list", routes.list_ledgers)
    router.add("GET", "/api/v1/ledger/metadata", routes.ledger_metadata)
    router.add("DELETE", "/api/v1/ledger/delete", routes.delete_ledger)
