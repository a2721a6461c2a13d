"""The life of one entry log: its states and the one table of legal transitions.

Theory of operation
-------------------
:class:`~bookiesim.entrylog.log_files.LogFiles` keeps the state of every log of this run
that it still has to care about, and moves it only through :func:`next_state`, which looks
the move up in :data:`TRANSITIONS` and refuses anything else with
:class:`IllegalTransition`. No I/O here, so hypothesis can walk the table on its own
(``tests/entrylog/test_lifecycle.py``)::

    RESERVED -create_file-> POOLED -open-> PREALLOCATED -activate-> ACTIVE -rotate-> ROTATED
    ROTATED -checkpoint-> FLUSHED -delete-> DELETED

    and on the side:  RESERVED -open-> PREALLOCATED   (made now, for want of a pooled log)
                      PREALLOCATED -return_to_pool-> POOLED, PREALLOCATED -relocate-> itself
                      RESERVED, POOLED, PREALLOCATED -discard-> DISCARDED
                      ACTIVE -close-> CLOSED          (the logger closes)

* RESERVED: an id allocated (``lastId`` names it) and registered unflushed with
  ``RecentEntryLogsStatus``; no file yet (the pool's worker, or the owner, creates it).
* POOLED: an empty file created ahead of need; no descriptor, no buffer.
* PREALLOCATED: open for writing, header only, not handed to a manager yet (upstream's
  preallocated log). Every log passes here; at most one stays between adds.
* ACTIVE: a manager writes to it (one ledger's in per-ledger mode, every ledger's in
  single-log mode).
* ROTATED: sealed (ledgers map appended), descriptor closed unless a write error left
  bytes only in memory, waiting for the checkpoint that fsyncs it.
* FLUSHED: fsynced and marked flushed, so leastUnflushedLogId may pass it and GC may
  delete it; DELETED: removed by GC.

Every state but the last two pins leastUnflushedLogId. FLUSHED, DELETED, DISCARDED (an id
given up unused: a file that was not ours, or the pool emptied at close) and CLOSED (open
at shutdown; the next run counts it flushed, as every log of an earlier run) are *final*:
the file set forgets the log, so memory stays bounded by the logs in flight, and a log it
does not know is taken to be FLUSHED (or of an earlier run) — :func:`tracked`.

ACTIVE -> ROTATED
-----------------
Rotation always does the same thing whatever its reason: append the ledgers map (patching
the header), hand the buffer to the OS, and queue the log. The log is fsynced at the next
checkpoint and only then marked flushed. One deliberate difference from upstream: a rotated
log's file descriptor is closed at rotation, not at the next checkpoint; the checkpoint
fsyncs it by path (``open``, ``fsync``, ``close``: fsync persists the file's dirty pages
whichever descriptor wrote them, and since Linux 4.16 a write-back error nobody has seen is
reported to a new descriptor too). Why: under churn (10,000 ledgers, 500 active) nearly
every add rotates a log, so upstream's "rotated but not yet checkpointed" descriptors, each
holding a 64 KiB write buffer, grow with the add rate times ``flushInterval`` — hundreds of
thousands at 40,000 adds/s. Closing at rotation bounds write descriptors by
``maximumNumberOfActiveEntryLogs + 1`` (the preallocated log). The one exception is a log
whose buffer cannot reach the OS (a write error): it stays open, since closing it would drop
entries that are only in memory, until a checkpoint manages to flush it.

PREALLOCATED
------------
``entryLogFilePreallocationEnabled``: each new log is the one opened on the previous call,
and the next one is opened right away, so ids advance one ahead and the preallocated log is
registered as unflushed: it **pins leastUnflushedLogId** until it is used, rotated and
checkpointed, exactly as upstream's. Logs are born RESERVED (:meth:`LogFiles.reserve_ids
<bookiesim.entrylog.log_files.LogFiles.reserve_ids>`), whether for the pool or for a log
needed now.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "FINAL_STATES",
    "TRANSITIONS",
    "IllegalTransition",
    "LogEvent",
    "LogState",
    "next_state",
    "tracked",
]


class LogState(enum.Enum):
    """Where an entry log is in its life (see the module docstring)."""

    RESERVED = "reserved"
    POOLED = "pooled"
    PREALLOCATED = "preallocated"
    ACTIVE = "active"
    ROTATED = "rotated"
    FLUSHED = "flushed"
    DELETED = "deleted"
    DISCARDED = "discarded"
    CLOSED = "closed"


class LogEvent(enum.Enum):
    """What happens to a log; each names one method of the file set."""

    CREATE_FILE = "create_file"
    """The pool's worker created the reserved id's empty file."""
    OPEN = "open"
    """A writer was opened on a reserved id (file created now) or a pooled file."""
    RETURN_TO_POOL = "return_to_pool"
    """The preallocated log sat in a busier dir: closed, back to its dir's pool."""
    RELOCATE = "relocate"
    """The preallocated log was moved to the least loaded dir under the same id."""
    ACTIVATE = "activate"
    """A manager took the log for its next entries."""
    ROTATE = "rotate"
    """A manager stopped writing it (the rotation policy said why)."""
    CHECKPOINT = "checkpoint"
    """A checkpoint fsynced it."""
    DELETE = "delete"
    """GC removed its file."""
    DISCARD = "discard"
    """The id was given up before any entry was written to it."""
    CLOSE = "close"
    """The entry logger closed while the log was active."""


_S = LogState
_E = LogEvent

TRANSITIONS: Mapping[tuple[LogState, LogEvent], LogState] = {
    (_S.RESERVED, _E.CREATE_FILE): _S.POOLED,
    (_S.RESERVED, _E.OPEN): _S.PREALLOCATED,
    (_S.RESERVED, _E.DISCARD): _S.DISCARDED,
    (_S.POOLED, _E.OPEN): _S.PREALLOCATED,
    (_S.POOLED, _E.DISCARD): _S.DISCARDED,
    (_S.PREALLOCATED, _E.ACTIVATE): _S.ACTIVE,
    (_S.PREALLOCATED, _E.RETURN_TO_POOL): _S.POOLED,
    (_S.PREALLOCATED, _E.RELOCATE): _S.PREALLOCATED,
    (_S.PREALLOCATED, _E.DISCARD): _S.DISCARDED,
    (_S.ACTIVE, _E.ROTATE): _S.ROTATED,
    (_S.ACTIVE, _E.CLOSE): _S.CLOSED,
    (_S.ROTATED, _E.CHECKPOINT): _S.FLUSHED,
    (_S.FLUSHED, _E.DELETE): _S.DELETED,
}
"""(state, event) -> next state: every legal move of a log, and only those."""

FINAL_STATES = frozenset({_S.FLUSHED, _S.DELETED, _S.DISCARDED, _S.CLOSED})
"""States the file set does not keep: it forgets a log on reaching one."""


class IllegalTransition(ValueError):
    """A move that :data:`TRANSITIONS` does not list (a bug in the caller)."""

    def __init__(self, log_id: int, state: LogState, event: LogEvent) -> None:
        legal = sorted(e.value for (s, e) in TRANSITIONS if s is state)
        why = "; it is not flushed yet, so it cannot be removed" if event is LogEvent.DELETE else ""
        super().__init__(
            f"entry log {log_id:x} is {state.value}: {event.value} is not allowed "
            f"(allowed: {', '.join(legal) or 'nothing'}){why}"
        )
        self.log_id = log_id
        self.state = state
        self.event = event


def next_state(log_id: int, state: LogState, event: LogEvent) -> LogState:
    """The state ``event`` moves a log in ``state`` to; :class:`IllegalTransition` if none."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(log_id, state, event) from None


def tracked(state: LogState) -> bool:
    """Whether the file set keeps a log in this state (False for the final states)."""
    return state not in FINAL_STATES
