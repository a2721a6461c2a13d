"""Upstream's admin routes about this bookie: its liveness, configuration, state and files.

==========================================  =================================================
``* /heartbeat``                            200 ``OK`` and a newline, any method
``GET /api/v1/config/server_config``        the configuration, ``{"key": "value", ...}`` with
                                            every value a string; a value with commas is a
                                            list to upstream's configuration, shown
                                            ``[a, b]``
``PUT /api/v1/config/server_config``        a JSON object of keys to values, recorded and shown
                                            by GET; as upstream, nothing re-reads them (a
                                            restart with the file does); 404 without a body
``GET /api/v1/bookie/is_ready``             200 ``OK``; 503 while starting or stopping
``GET /api/v1/bookie/state/readonly``       ``{"readOnly": bool}``
``PUT /api/v1/bookie/state/readonly``       ``{"readOnly": bool}``: turn read-only (400 when
                                            ``readOnlyModeEnabled=false``) or writable again;
                                            answers the state after
``GET /api/v1/bookie/list_disk_file``       ``?file_type=journal|entrylog|index`` (else all):
                                            ``{"journal files": "a.txn\\tb.txn\\t", ...}``,
                                            names oldest first, each followed by a tab
``GET /api/v1/bookie/last_log_mark``        per journal directory, the checkpointed mark
                                            (``lastMark``): ``{"LastLogMark: Journal Id - ID
                                            (HEX.txn)": "Pos - OFFSET"}``
==========================================  =================================================

``/api/v1/bookie/info`` and ``/api/v1/bookie/state`` are bookiesim's own routes
(:mod:`.process`), whose answers hold upstream's keys. A body upstream could not parse gets
500 with an empty body, as upstream's error service answers.

One difference: a bookie read-only for lack of disk space or after a failure stays read-only
after ``PUT {"readOnly": false}`` (the answer says so); upstream turns writable until its next
disk check turns it read-only again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bookiesim.bookie.config import CONFIG_KEYS
from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    text_response,
)
from bookiesim.bookie.journal.log_mark import LastMarkFormatError, mark_index, read_last_mark

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from bookiesim.bookie.bookie import Bookie
    from bookiesim.bookie.config import BookieConfig

__all__ = ["DISK_FILE_TYPES", "add_upstream_bookie_routes", "disk_files", "shown_as_upstream"]

DISK_FILE_TYPES: dict[str, tuple[str, str]] = {
    # file_type: (answer's key, file suffix)
    "journal": ("journal files", ".txn"),
    "entrylog": ("entrylog files", ".log"),
    "index": ("index files", ".idx"),
}


def _failed() -> AdminResponse:
    # Upstream's answer when its service throws (an unparseable body): 500, no body.
    return AdminResponse(500, "text/plain; charset=utf-8", b"")


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def shown_as_upstream(text: str) -> str:
    """A configuration value as upstream's server_config shows it: its configuration splits
    values at commas into lists, and a list shows as ``[a, b]``."""
    parts = [part.strip() for part in text.split(",")]
    return f"[{', '.join(parts)}]" if len(parts) > 1 else text


def disk_files(directories: Iterable[Path], suffix: str) -> list[str]:
    """Names of the files ending in ``suffix`` anywhere under ``directories``, oldest
    first (by modification time, then name)."""
    found: list[tuple[float, str]] = []
    for directory in directories:
        for root, _dirs, names in os.walk(directory):
            for name in names:
                if name.endswith(suffix):
                    try:
                        mtime = os.stat(os.path.join(root, name)).st_mtime
                    except FileNotFoundError:  # deleted meanwhile (GC, journal removal)
                        continue
                    found.append((mtime, name))
    return [name for _mtime, name in sorted(found)]


@dataclass
class _BookieRoutes:
    cfg: BookieConfig
    bookie: Callable[[], Bookie]
    config_set: dict[str, str] = field(default_factory=dict)
    """Keys PUT on server_config: shown by GET, applied by nothing (as upstream)."""

    async def heartbeat(self, request: AdminRequest) -> AdminResponse:
        return text_response("OK\n")

    async def get_config(self, request: AdminRequest) -> AdminResponse:
        values = {
            spec.key: shown_as_upstream(spec.format(getattr(self.cfg, spec.attr)))
            for spec in CONFIG_KEYS
        }
        return json_response(values | self.config_set)

    async def put_config(self, request: AdminRequest) -> AdminResponse:
        if not request.body:
            return text_response("no body: send a JSON object of keys and values", 404)
        given = _json_object(request.body)
        if given is None:
            return _failed()
        # Upstream keeps any value as given and shows it as a string (a JSON list, as a
        # Java list prints, is what json.dumps writes: "[1, 2]").
        self.config_set |= {
            key: shown_as_upstream(value) if isinstance(value, str) else json.dumps(value)
            for key, value in given.items()
        }
        return text_response("Success set server config.")

    async def is_ready(self, request: AdminRequest) -> AdminResponse:
        if self.bookie().ready.is_set():
            return text_response("OK")
        return text_response("the bookie is not started yet", 503)

    async def get_read_only(self, request: AdminRequest) -> AdminResponse:
        return json_response({"readOnly": self.bookie().is_read_only})

    async def put_read_only(self, request: AdminRequest) -> AdminResponse:
        given = _json_object(request.body)
        wanted = None if given is None else given.get("readOnly", False)
        if isinstance(wanted, str) and wanted.lower() in ("true", "false"):
            wanted = wanted.lower() == "true"  # Jackson reads a boolean from these strings
        if given is None or not isinstance(wanted, bool) or set(given) - {"readOnly"}:
            return _failed()
        bookie = self.bookie()
        # As upstream, only a change of state acts: asking a read-only bookie to be
        # read-only leaves it to turn writable when its disks have room again.
        if wanted and not bookie.is_read_only:
            if not self.cfg.read_only_mode_enabled:
                return text_response(
                    "readOnlyModeEnabled is false: this bookie cannot turn read-only", 400
                )
            bookie.set_admin_read_only(True)
        elif not wanted and bookie.is_read_only:
            bookie.set_admin_read_only(False)
        return json_response({"readOnly": bookie.is_read_only})

    async def list_disk_file(self, request: AdminRequest) -> AdminResponse:
        wanted = request.query.get("file_type")
        types = [wanted] if wanted in DISK_FILE_TYPES else list(DISK_FILE_TYPES)
        where = {
            "journal": self.cfg.effective_journal_directories,
            "entrylog": self.cfg.ledger_directories,
            "index": self.cfg.effective_index_directories,
        }
        answer: dict[str, str] = {}
        for file_type in types:
            key, suffix = DISK_FILE_TYPES[file_type]
            answer[key] = "".join(f"{name}\t" for name in disk_files(where[file_type], suffix))
        return json_response(answer)

    async def last_log_mark(self, request: AdminRequest) -> AdminResponse:
        journals = self.cfg.effective_journal_directories
        answer: dict[str, str] = {}
        try:
            for index in range(len(journals)):
                mark = read_last_mark(self.cfg.ledger_directories, mark_index(index, len(journals)))
                key = f"LastLogMark: Journal Id - {mark.file_id}({mark.file_id:x}.txn)"
                answer[key] = f"Pos - {mark.offset}"
        except (OSError, LastMarkFormatError) as exc:
            return text_response(f"cannot read the last log mark: {exc}", 404)
        return json_response(answer)


def add_upstream_bookie_routes(
    router: AdminRouter, cfg: BookieConfig, bookie: Callable[[], Bookie]
) -> None:
    """Route the table above (``bookie`` gives the running bookie when a request comes)."""
    routes = _BookieRoutes(cfg, bookie)
    for method in ("GET", "PUT", "POST", "DELETE"):
        router.add(method, "/heartbeat", routes.heartbeat)
    router.add("GET", "/api/v1/config/server_config", routes.get_config)
    router.add("PUT", "/api/v1/config/server_config", routes.put_config)
    router.add("GET", "/api/v1/bookie/is_ready", routes.is_ready)
    router.add("GET", "/api/v1/bookie/state/readonly", routes.get_read_only)
    router.add("PUT", "/api/v1/bookie/state/readonly", routes.put_read_only)
    router.add("GET", "/api/v1/bookie/list_disk_file", routes.list_disk_file)
    router.add("GET", "/api/v1/bookie/last_log_mark", routes.last_log_mark)
