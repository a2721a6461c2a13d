"""``bookiesim shell gc``: force a garbage collection on a running bookie through its admin
HTTP API and show its entry logs' usage."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from bookiesim.cli.shell.common import EXIT_BAD_FILE, Out, counted
from bookiesim.console import Column, quiet_broken_pipe

if TYPE_CHECKING:
    import argparse

GC_KEYS = """\
Give the bookie as --url http://HOST:PORT or --port PORT [--host HOST] (its httpServerPort).
Without options both compactions may run, as the bookie's configuration allows; --major or
--minor allows one of them for this pass, --no-compaction neither.

JSON keys: first {"type": "gc"} (unless --details): triggered, and the pass's report:
forced, ledgersDeleted, logsExtracted, logsDeleted, reclaimedByDeletion, compaction
("major", "minor" or null), logsCompacted, reclaimedByCompaction, bytesCopied, seconds;
then {"type": "entryLog"} per tracked log: logId, logIdHex, totalSize, remainingSize, usage,
ledgers; summary: logs, totalSize, remainingSize, and the GC status (majorCompactionCounter,
minorCompactionCounter, isMajorGcSuspended, isMinorGcSuspended, gcRuns, ...).
With --suspend/--resume: {"type": "summary", "isMajorGcSuspended", "isMinorGcSuspended"}.
"""


class _AdminError(Exception):
    """The bookie could not be reached, or answered with an error."""


def _admin_call(base: str, method: str, path: str, body: object, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except (ValueError, AttributeError):
            message = exc.reason
        raise _AdminError(f"{method} {base + path}: HTTP {exc.code}: {message}") from None
    except (OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise _AdminError(f"{method} {base + path}: {reason}") from None


def _admin_base(args: argparse.Namespace) -> str:
    if args.url:
        if args.port is not None:
            raise _AdminError("give --url or --port, not both")
        url: str = args.url
        if not url.startswith(("http://", "https://")):
            raise _AdminError(f"--url {url!r} is not an http:// URL")
        return url.rstrip("/")
    if args.port is None:
        raise _AdminError("say which bookie: --url http://HOST:PORT or --port PORT")
    if not 0 < args.port < 65536:
        raise _AdminError(f"--port {args.port} is not a TCP port")
    return f"http://{args.host}:{args.port}"


def gc_command(args: argparse.Namespace) -> int:
    out = Out(args.json)
    try:
        code = _gc(args, out)
        out.lines.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt:
        return 130
    except _AdminError as exc:
        try:
            out.lines.flush()
        except BrokenPipeError:
            quiet_broken_pipe()
        print(f"bookiesim shell gc: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    return code


def _gc(args: argparse.Namespace, out: Out) -> int:
    base = _admin_base(args)
    timeout = args.timeout
    if args.suspend or args.resume:
        verb, which = ("suspend", args.suspend) if args.suspend else ("resume", args.resume)
        body = {
            f"{verb}Major": which in ("major", "both"),
            f"{verb}Minor": which in ("minor", "both"),
        }
        flags = _admin_call(base, "PUT", f"/api/v1/bookie/gc/{verb}_compaction", body, timeout)
        if out.json_lines:
            out.lines.json({"type": "summary", **flags})
        else:
            out.note(
                f"major compaction suspended: {flags['isMajorGcSuspended']}, "
                f"minor compaction suspended: {flags['isMinorGcSuspended']}"
            )
        return 0
    if not args.details:
        body = {}
        if args.major or args.minor or args.no_compaction:
            body = {"forceMajor": bool(args.major), "forceMinor": bool(args.minor)}
        query = "?wait=false" if args.no_wait else "?wait=true"
        answer = _admin_call(base, "PUT", "/api/v1/bookie/gc" + query, body, timeout)
        report = answer.get("report")
        if out.json_lines:
            out.lines.json({"type": "gc", "triggered": answer["triggered"], **(report or {})})
        elif report is None:
            out.note(answer["message"])
        else:
            compaction = report["compaction"] or "no"
            out.note(
                f"GC pass: {len(report['ledgersDeleted'])} ledgers deleted, "
                f"{len(report['logsDeleted'])} logs deleted "
                f"({report['reclaimedByDeletion']} bytes), {compaction} compaction: "
                f"{len(report['logsCompacted'])} logs compacted "
                f"({report['reclaimedByCompaction']} bytes reclaimed, "
                f"{report['bytesCopied']} copied), {report['seconds']:.3f} s"
            )
    (status,) = _admin_call(base, "GET", "/api/v1/bookie/gc_details", None, timeout)
    logs = status.pop("entryLogs")
    table = out.table(
        Column("logId", 10),
        Column("totalSize", 12),
        Column("remainingSize", 13),
        Column("usage", 6),
        Column("ledgers", 0, "left"),
    )
    for entry in logs:
        if table is None:
            out.lines.json({"type": "entryLog", **entry})
        else:
            ledgers = ",".join(map(str, entry["ledgers"][:8]))
            if len(entry["ledgers"]) > 8:
                ledgers += f",... ({len(entry['ledgers'])})"
            table.row(
                entry["logIdHex"],
                entry["totalSize"],
                entry["remainingSize"],
                f"{entry['usage']:.3f}",
                ledgers,
            )
    out.finish(table)
    total = sum(e["totalSize"] for e in logs)
    remaining = sum(e["remainingSize"] for e in logs)
    if out.json_lines:
        summary = {"logs": len(logs), "totalSize": total, "remainingSize": remaining}
        out.lines.json({"type": "summary", **summary, **status})
    else:
        out.note(
            f"{counted(len(logs), 'entry log')} tracked, {remaining} of {total} bytes live; "
            f"compactions: {status['majorCompactionCounter']} major, "
            f"{status['minorCompactionCounter']} minor; suspended: "
            f"major {status['isMajorGcSuspended']}, minor {status['isMinorGcSuspended']}"
        )
    return 0
