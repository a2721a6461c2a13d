"""The garbage collector's admin endpoints, as upstream's HTTP admin API names them.

=====================================================  ==========================================
``PUT /api/v1/bookie/gc``                              force a GC pass; optional JSON body
                                                       ``{"forceMajor": bool, "forceMinor": bool}``
                                                       (false suspends that compaction for the
                                                       pass); upstream's answer, a JSON string.
                                                       With ``?wait=`` (bookiesim) an object
                                                       ``{"triggered", "message"}``;
                                                       ``?wait=true`` answers when the pass is
                                                       over, with its report.
``GET /api/v1/bookie/gc``                              ``{"is_in_force_gc": "true"|"false"}`` as
                                                       upstream, plus ``gcRunning``
``GET /api/v1/bookie/gc_details``                      upstream's list of one GC status object,
                                                       plus ``entryLogs``: each tracked log's
                                                       ``logId``, ``totalSize``,
                                                       ``remainingSize``, ``usage``, ``ledgers``
``PUT /api/v1/bookie/gc/suspend_compaction``           ``{"suspendMajor": bool, "suspendMinor":
                                                       bool}``; ``GET`` shows the flags
``PUT /api/v1/bookie/gc/resume_compaction``            ``{"resumeMajor": bool, "resumeMinor":
                                                       bool}``
=====================================================  ==========================================

A body that is not a JSON object, a key we do not know, or a value that is not a boolean gets
400 with a message naming it (upstream ignores unknown keys; a typo there silently does
nothing).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bookiesim.bookie.http_admin import AdminRequest, AdminResponse, AdminRouter, json_response

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from bookiesim.gc.collector import GarbageCollector, GcRunReport

__all__ = ["add_gc_routes", "report_json"]

GC_PATH = "/api/v1/bookie/gc"
GC_DETAILS_PATH = "/api/v1/bookie/gc_details"
SUSPEND_PATH = "/api/v1/bookie/gc/suspend_compaction"
RESUME_PATH = "/api/v1/bookie/gc/resume_compaction"


class _BadRequest(Exception):
    pass


def _flags(body: bytes, keys: Collection[str], *, required: bool) -> dict[str, bool]:
    """The boolean flags of a JSON object body; ``{}`` for an empty body unless required."""
    if not body.strip():
        if required:
            raise _BadRequest(f"a JSON object with {' or '.join(keys)} is required")
        return {}
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _BadRequest(f"request body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _BadRequest(f"request body must be a JSON object, not {type(obj).__name__}")
    flags: dict[str, bool] = {}
    for key, value in obj.items():
        if key not in keys:
            raise _BadRequest(f"unknown key {key!r}; known: {', '.join(keys)}")
        if not isinstance(value, bool):
            raise _BadRequest(f"{key} must be true or false, not {json.dumps(value)}")
        flags[key] = value
    if required and not any(flags.values()):
        raise _BadRequest(f"none of {', '.join(keys)} is true: nothing to do")
    return flags


def _bad(exc: _BadRequest) -> AdminResponse:
    return json_response({"error": str(exc)}, 400)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def report_json(report: GcRunReport) -> dict[str, Any]:
    """A GC pass as JSON (the answer to ``PUT /api/v1/bookie/gc?wait=true``)."""
    return {
        "forced": report.forced,
        "ledgersDeleted": report.ledgers_deleted,
        "logsExtracted": report.logs_extracted,
        "logsDeleted": report.logs_deleted,
        "reclaimedByDeletion": report.reclaimed_by_deletion,
        "compaction": None if report.compaction is None else report.compaction.value,
        "logsCompacted": [r.log_id for r in report.compacted],
        "reclaimedByCompaction": report.reclaimed_by_compaction,
        "bytesCopied": report.bytes_copied,
        "seconds": report.seconds,
    }


def add_gc_routes(
    router: AdminRouter, gc: GarbageCollector, bookie_id: Callable[[], str] = lambda: ""
) -> None:
    """Route the GC endpoints of the table above to ``gc`` (``bookie_id`` names the bookie
    in upstream's answer to a trigger)."""

    async def trigger(request: AdminRequest) -> AdminResponse:
        try:
            flags = _flags(request.body, ("forceMajor", "forceMinor"), required=False)
        except _BadRequest as exc:
            return _bad(exc)
        wait = request.query.get("wait", "false").lower()
        if wait not in ("true", "false", "1", "0", ""):
            return json_response({"error": f"wait must be true or false, not {wait!r}"}, 400)
        triggered = gc.trigger(flags.get("forceMajor"), flags.get("forceMinor"))
        if "wait" not in request.query:
            # Upstream's answer: a JSON string naming the bookie.
            return json_response(f"Triggered GC on BookieServer: {bookie_id()}")
        answer: dict[str, Any] = {
            "triggered": triggered,
            "message": "GC triggered" if triggered else "a forced GC is already pending",
        }
        if wait in ("true", "1", ""):
            await gc.forced_pass_done.wait()
            if gc.last_report is not None:
                answer["report"] = report_json(gc.last_report)
        return json_response(answer)

    async def state(request: AdminRequest) -> AdminResponse:
        return json_response(
            {"is_in_force_gc": _bool_text(gc.force_requested), "gcRunning": gc.running}
        )

    async def details(request: AdminRequest) -> AdminResponse:
        logs = [
            {
                "logId": u.log_id,
                "logIdHex": f"{u.log_id:x}",
                "totalSize": u.total_size,
                "remainingSize": u.remaining_size,
                "usage": u.usage,
                "ledgers": list(u.ledgers),
            }
            for u in gc.usage.describe()
        ]
        # Upstream's entry-location fields are about DbLedgerStorage's index compaction,
        # which bookiesim's storages do not have: never run, so zero.
        upstream_only = {"lastEntryLocationCompactionTime": 0, "entryLocationCompactionCounter": 0}
        return json_response([gc.status() | upstream_only | {"entryLogs": logs}])

    async def suspend(request: AdminRequest) -> AdminResponse:
        try:
            flags = _flags(request.body, ("suspendMajor", "suspendMinor"), required=True)
        except _BadRequest as exc:
            return _bad(exc)
        gc.suspend(major=flags.get("suspendMajor", False), minor=flags.get("suspendMinor", False))
        return await suspended(request)

    async def suspended(request: AdminRequest) -> AdminResponse:
        return json_response(
            {
                "isMajorGcSuspended": _bool_text(gc.suspend_major),
                "isMinorGcSuspended": _bool_text(gc.suspend_minor),
            }
        )

    async def resume(request: AdminRequest) -> AdminResponse:
        try:
            flags = _flags(request.body, ("resumeMajor", "resumeMinor"), required=True)
        except _BadRequest as exc:
            return _bad(exc)
        gc.resume(major=flags.get("resumeMajor", False), minor=flags.get("resumeMinor", False))
        return await suspended(request)

    router.add("PUT", GC_PATH, trigger)
    router.add("GET", GC_PATH, state)
    router.add("GET", GC_DETAILS_PATH, details)
    router.add("PUT", SUSPEND_PATH, suspend)
    router.add("GET", SUSPEND_PATH, suspended)
    router.add("PUT", RESUME_PATH, resume)
