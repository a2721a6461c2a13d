"""Upstream's admin HTTP API as data: every route upstream 4.17.4's ``HttpRouter`` binds,
the methods its service answers, and how it answers any other method.

Upstream's routes accept every method at the HTTP layer and leave the choice to the
service, which answers a method it does not serve with a status (404 for most, 405 for
``/api/v1/bookie/gc``) and a line of text. bookiesim's router answers 405 with ``Allow``;
on upstream's paths :func:`answer_wrong_methods_as_upstream` makes it answer as upstream,
so that a script written against an upstream bookie sees the same statuses here.

``served`` says which of them bookiesim answers (the rest are unknown paths, 404). The
handlers live by meaning: :mod:`.http_upstream_bookie` (this bookie's own state and files),
:mod:`.http_upstream_cluster` (bookies and ledgers, through the metadata store),
:mod:`.gc_admin` (GC), :mod:`bookiesim.autorecovery.http_routes` (auto-recovery) and
:mod:`bookiesim.adminapi` (what needs a client: ledger reads, the bookies' disk space).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    Handler,
    text_response,
)

__all__ = ["UPSTREAM_ROUTES", "UpstreamRoute", "answer_wrong_methods_as_upstream"]


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    path: str
    methods: tuple[str, ...]
    """The methods upstream's service acts on; any other gets ``wrong_method_status``."""
    wrong_method_status: int
    served: bool
    """bookiesim answers this route (with upstream's methods, statuses and shapes)."""
    group: str
    """Which module serves it: bookie, cluster, gc, autorecovery, metrics, client
    (:mod:`bookiesim.adminapi`, a companion with a BookKeeper client)."""


def _route(
    path: str, methods: str, group: str, *, wrong: int = 404, served: bool = True
) -> UpstreamRoute:
    return UpstreamRoute(path, tuple(methods.split()), wrong, served, group)


_ANY: Final = "GET PUT POST DELETE"
_BOOKIE: Final = "/api/v1/bookie"
_LEDGER: Final = "/api/v1/ledger"
_AR: Final = "/api/v1/autorecovery"

UPSTREAM_ROUTES: Final[tuple[UpstreamRoute, ...]] = (
    _route("/heartbeat", _ANY, "bookie"),
    _route("/api/v1/config/server_config", "GET PUT", "bookie"),
    _route("/metrics", "GET", "metrics", wrong=403),
    _route(f"{_BOOKIE}/info", "GET", "bookie"),
    _route(f"{_BOOKIE}/list_bookies", "GET", "cluster"),
    _route(f"{_BOOKIE}/list_bookie_info", "GET", "client"),
    _route(f"{_BOOKIE}/state", "GET", "bookie"),
    _route(f"{_BOOKIE}/is_ready", "GET", "bookie"),
    _route(f"{_BOOKIE}/gc", "GET PUT", "gc", wrong=405),
    _route(f"{_BOOKIE}/gc_details", "GET", "gc"),
    _route(f"{_BOOKIE}/gc/suspend_compaction", "GET PUT", "gc"),
    _route(f"{_BOOKIE}/gc/resume_compaction", "PUT", "gc"),
    _route(f"{_BOOKIE}/list_disk_file", "GET", "bookie"),
    _route(f"{_BOOKIE}/last_log_mark", "GET", "bookie"),
    _route(f"{_BOOKIE}/state/readonly", "GET PUT", "bookie"),
    _route(f"{_BOOKIE}/expand_storage", "PUT", "bookie", served=False),
    _route(f"{_BOOKIE}/sanity", "GET", "client"),
    _route(f"{_BOOKIE}/cluster_info", "GET", "cluster"),
    _route(f"{_BOOKIE}/entry_location_compact", "GET PUT", "bookie", served=False),
    _route(f"{_LEDGER}/list", "GET", "cluster"),
    _route(f"{_LEDGER}/metadata", "GET", "cluster"),
    _route(f"{_LEDGER}/read", "GET", "client"),
    _route(f"{_LEDGER}/delete", "DELETE", "cluster"),
    _route(f"{_AR}/bookie", "PUT", "autorecovery"),
    _route(f"{_AR}/list_under_replicated_ledger", "GET", "autorecovery"),
    _route(f"{_AR}/who_is_auditor", "GET", "autorecovery"),
    _route(f"{_AR}/trigger_audit", "PUT", "autorecovery"),
    _route(f"{_AR}/lost_bookie_recovery_delay", "GET PUT", "autorecovery"),
    _route(f"{_AR}/decommission", "PUT", "autorecovery"),
    _route(f"{_AR}/status", "GET PUT", "autorecovery"),
)


def _wrong_method(route: UpstreamRoute) -> Handler:
    expected = " or ".join(route.methods)

    async def answer(request: AdminRequest) -> AdminResponse:
        return text_response(
            f"{request.method} is not served on {route.path}: use {expected}",
            route.wrong_method_status,
        )

    return answer


def answer_wrong_methods_as_upstream(router: AdminRouter) -> None:
    """On every upstream path routed on ``router``, answer other methods as upstream does.

    Call it once every group has added its routes."""
    for route in UPSTREAM_ROUTES:
        if router.routed(route.path):
            router.on_wrong_method(route.path, _wrong_method(route))
