"""Auto-recovery's admin HTTP routes, as upstream's HTTP admin API names and answers them.

They are served by every process that runs auto-recovery: a bookie with
``autoRecoveryDaemonEnabled=true`` (beside ``/api/v1/bookie/...``) and ``bookiesim
autorecovery`` alone (beside its ``/metrics``). Each does what the shell command of the same
purpose does (:mod:`.admin`), on the process's own store session.

==================================================  ============================================
``PUT /api/v1/autorecovery/bookie``                 ``{"bookie_src": ["host:port", ...],
                                                    "delete_cookie": bool}``: re-replicate the
                                                    lost bookies' ledgers now, in the
                                                    background; 200 ``Success send recovery
                                                    request command.``
``GET /api/v1/autorecovery/list_under_replicated_ledger``
                                                    ``?missingreplica=B&excludingmissingreplica=
                                                    B&printmissingreplica``: a JSON list of
                                                    ledger ids, or with ``printmissingreplica``
                                                    an object ``{"id": [replicas]}``; 404 ``No
                                                    under replicated ledgers found``
``GET /api/v1/autorecovery/who_is_auditor``         ``Auditor: host:port``; 404 ``No auditor
                                                    elected``
``PUT /api/v1/autorecovery/trigger_audit``          ``Success trigger audit.``
``GET /api/v1/autorecovery/lost_bookie_recovery_delay``
                                                    ``lostBookieRecoveryDelay value: N``
``PUT /api/v1/autorecovery/lost_bookie_recovery_delay``
                                                    ``{"delay_seconds": N}``: ``Success set
                                                    lostBookieRecoveryDelay to N``
``PUT /api/v1/autorecovery/decommission``           ``{"bookie_src": "host:port"}``: decommission
                                                    in the background; ``Success send
                                                    decommission Bookie command host:port``
``GET /api/v1/autorecovery/status``                 ``{"enabled": bool}``
``PUT /api/v1/autorecovery/status?enabled=B``       set it; answers the new ``{"enabled": bool}``
==================================================  ============================================

Answers are upstream's: successful ones word for word (text where upstream answers text,
JSON where it answers JSON), so scripts written for upstream's bookies work here, and
refusals with upstream's status — 404 and a line of text for a body or parameter that is
wrong, a bookie to recover or decommission that is still registered, nothing that would act
(no auditor elected, auto-recovery disabled), nothing found; 400 for ``PUT status`` without
``enabled``. The text is ours and names what is wrong. A wrong method gets 404 too (the
bookie process routes upstream's paths so, :mod:`bookiesim.bookie.http_upstream_routes`).
Two refusals are bookiesim's own: upstream accepts a request to recover a bookie that is
still registered, and checks that a bookie to decommission is gone only in the background
job (logging the refusal); here both are refused at once, with upstream's 404.

Background jobs (recover, decommission) run in the process's nursery until done; their
outcome goes to the log, as upstream's, and shows in the store (marks, metadata, cookies).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from bookiesim.autorecovery.admin import (
    AdminError,
    check_bookie_id,
    decommission_bookie,
    list_under_replicated,
    set_lost_bookie_recovery_delay,
    trigger_audit,
)
from bookiesim.autorecovery.recover import recover_bookie_data
from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    text_response,
)
from bookiesim.bookie.http_upstream_routes import answer_wrong_methods_as_upstream
from bookiesim.metadata.registration import registered_bookies
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    import trio

    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.client import BookKeeper
    from bookiesim.metadata.store import MetadataStore

__all__ = ["PREFIX", "add_autorecovery_routes"]

log = logging.getLogger(__name__)

PREFIX = "/api/v1/autorecovery"


class _BadRequest(Exception):
    pass


def _refused(message: str, status: int = 404) -> AdminResponse:
    # Upstream refuses with 404 and a line of text almost everywhere here.
    return text_response(message, status)


def _body(request: AdminRequest) -> dict[str, Any]:
    if not request.body.strip():
        raise _BadRequest("a JSON object body is required")
    try:
        obj = json.loads(request.body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _BadRequest(f"request body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _BadRequest(f"request body must be a JSON object, not {type(obj).__name__}")
    return obj


def _bool_param(value: str) -> bool:
    # As Java's Boolean.parseBoolean: "true" in any case is true, anything else false.
    return value.strip().lower() == "true"


class _Routes:
    def __init__(
        self,
        store: MetadataStore,
        client: BookKeeper,
        nursery: trio.Nursery,
        config: AutoRecoveryConfig,
    ) -> None:
        self.store = store
        self.client = client
        self.nursery = nursery
        self.config = config
        self.urm = UnderReplicationManager(store)

    async def recover(self, request: AdminRequest) -> AdminResponse:
        try:
            body = _body(request)
            sources = body.get("bookie_src")
            if not isinstance(sources, list) or not sources:
                raise _BadRequest('"bookie_src" must be a non-empty list of bookie ids')
            bookies = [check_bookie_id(str(b)) for b in sources]
            delete_cookie = body.get("delete_cookie", False)
            if not isinstance(delete_cookie, bool):
                raise _BadRequest('"delete_cookie" must be true or false')
        except (_BadRequest, AdminError) as exc:
            return _refused(str(exc))
        running = sorted(set(bookies) & await registered_bookies(self.store))
        if running:
            message = f"bookie {', '.join(running)} is registered (running): nothing to recover"
            return _refused(message)
        self.nursery.start_soon(self._recover, bookies, delete_cookie)
        return text_response("Success send recovery request command.")

    async def _recover(self, bookies: list[str], delete_cookie: bool) -> None:
        try:
            report = await recover_bookie_data(
                self.client,
                set(bookies),
                config=self.config,
                delete_cookies=delete_cookie,
            )
        except Exception:
            log.exception("recovering bookies %s failed", ", ".join(bookies))
        else:
            log.info("recovered bookies %s: %s", ", ".join(bookies), report.summary())

    async def list_under_replicated(self, request: AdminRequest) -> AdminResponse:
        query = request.query
        try:
            missing = query.get("missingreplica") or None
            excluding = query.get("excludingmissingreplica") or None
            missing = check_bookie_id(missing) if missing else None
            excluding = check_bookie_id(excluding) if excluding else None
        except AdminError as exc:
            return _refused(str(exc))
        marks = await list_under_replicated(
            self.urm, missing_replica=missing, excluding_missing_replica=excluding
        )
        if not marks:
            return text_response("No under replicated ledgers found", 404)
        if "printmissingreplica" in query:
            return json_response({str(m.ledger_id): list(m.replicas) for m in marks})
        return json_response([m.ledger_id for m in marks])

    async def who_is_auditor(self, request: AdminRequest) -> AdminResponse:
        auditor = await self.urm.auditor()
        if auditor is None:
            return text_response("No auditor elected", 404)
        return text_response(f"Auditor: {auditor}")

    async def trigger_audit(self, request: AdminRequest) -> AdminResponse:
        try:
            await trigger_audit(self.urm)
        except AdminError as exc:
            return _refused(str(exc))
        return text_response("Success trigger audit.")

    async def get_delay(self, request: AdminRequest) -> AdminResponse:
        delay = await self.urm.get_lost_bookie_recovery_delay()
        if delay is None:
            return _refused("lostBookieRecoveryDelay is not in the store: no auditor wrote it")
        return text_response(f"lostBookieRecoveryDelay value: {delay}")

    async def set_delay(self, request: AdminRequest) -> AdminResponse:
        try:
            body = _body(request)
            if "delay_seconds" not in body:
                raise _BadRequest('the body has no "delay_seconds"')
            delay = body["delay_seconds"]
            if isinstance(delay, bool) or not isinstance(delay, int):
                raise _BadRequest(f'"delay_seconds" must be whole seconds, not {delay!r}')
            await set_lost_bookie_recovery_delay(self.urm, delay)
        except (_BadRequest, AdminError) as exc:
            return _refused(str(exc))
        return text_response(f"Success set lostBookieRecoveryDelay to {delay}")

    async def decommission(self, request: AdminRequest) -> AdminResponse:
        try:
            body = _body(request)
            source = body.get("bookie_src")
            if not isinstance(source, str):
                raise _BadRequest('"bookie_src" must be a bookie id (host:port)')
            bookie = check_bookie_id(source)
        except (_BadRequest, AdminError) as exc:
            return _refused(str(exc))
        if bookie in await registered_bookies(self.store):
            message = f"bookie {bookie} is still registered (it is running): stop it first"
            return _refused(message)
        self.nursery.start_soon(self._decommission, bookie)
        return text_response(f"Success send decommission Bookie command {bookie}")

    async def _decommission(self, bookie: str) -> None:
        try:
            deleted = await decommission_bookie(self.store, self.urm, bookie)
        except Exception:
            log.exception("decommissioning bookie %s failed", bookie)
        else:
            cookie = "its cookie deleted" if deleted else "it had no cookie"
            log.info("decommissioned bookie %s: no ledger names it; %s", bookie, cookie)

    async def get_status(self, request: AdminRequest) -> AdminResponse:
        return json_response({"enabled": await self.urm.is_enabled()})

    async def put_status(self, request: AdminRequest) -> AdminResponse:
        enabled = request.query.get("enabled")
        if enabled is None:
            return _refused("the query has no enabled=true|false", 400)
        if _bool_param(enabled):
            await self.urm.enable()
        else:
            await self.urm.disable()
        return json_response({"enabled": await self.urm.is_enabled()})


def add_autorecovery_routes(
    router: AdminRouter,
    *,
    store: MetadataStore,
    client: BookKeeper,
    nursery: trio.Nursery,
    config: AutoRecoveryConfig,
) -> None:
    """Route ``/api/v1/autorecovery/...`` on ``router`` (see the module docstring);
    background jobs run in ``nursery``."""
    routes = _Routes(store, client, nursery, config)
    router.add("PUT", f"{PREFIX}/bookie", routes.recover)
    router.add("GET", f"{PREFIX}/list_under_replicated_ledger", routes.list_under_replicated)
    router.add("GET", f"{PREFIX}/who_is_auditor", routes.who_is_auditor)
    router.add("PUT", f"{PREFIX}/trigger_audit", routes.trigger_audit)
    router.add("GET", f"{PREFIX}/lost_bookie_recovery_delay", routes.get_delay)
    router.add("PUT", f"{PREFIX}/lost_bookie_recovery_delay", routes.set_delay)
    router.add("PUT", f"{PREFIX}/decommission", routes.decommission)
    router.add("GET", f"{PREFIX}/status", routes.get_status)
    router.add("PUT", f"{PREFIX}/status", routes.put_status)
    answer_wrong_methods_as_upstream(router)
