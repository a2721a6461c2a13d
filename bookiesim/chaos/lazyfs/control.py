"""The lazy file system's control protocol: one line in, one line out, over a Unix socket.

``crash``, ``crash tear=N`` (keep N bytes of the last unsynced write) or ``crash tear=0.5``
(keep that fraction of it), optionally with ``only=TEXT`` (tear the last unsynced write of
the files whose backing path contains TEXT, e.g. ``only=/journal/``) answer
``ok files=F dropped=B torn=none`` or ``ok files=F dropped=B torn=INODE@OFFSET:KEPT/LENGTH``,
once the mount shows the durable
state. ``hold only=TEXT`` makes every later fsync of the files whose path contains TEXT wait
for the crash and then fail (a power loss during the fsync: the data it would have made
durable stays unsynced); it answers ``ok``. ``status`` answers ``ok files=F held=H`` (files
with unsynced changes, fsyncs held). ``fail-reads only=TEXT`` makes every later read of the
files whose path contains TEXT fail with EIO (their writes and fsyncs go on) and answers
``ok files=N`` (the files known now that match: 0 says the text hits nothing yet);
``heal-reads`` (every text) or ``heal-reads only=TEXT`` ends that and answers ``ok failed=R``
(the reads refused since reads last all worked). Anything else answers ``error WHAT``.
A Unix socket (not a signal) because a crash needs an argument and an answer: the harness
must know the crash is done before it restarts the bookie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.chaos.lazyfs.model import CrashReport

__all__ = [
    "Crash",
    "FailReads",
    "HealReads",
    "Hold",
    "Status",
    "crash_line",
    "fail_reads_line",
    "format_crash",
    "heal_reads_line",
    "parse_command",
]


@dataclass(frozen=True)
class Crash:
    tear: int | float | None
    only: str | None = None
    """Tear among the files whose backing path contains this."""


@dataclass(frozen=True)
class Status:
    pass


@dataclass(frozen=True)
class Hold:
    only: str


@dataclass(frozen=True)
class FailReads:
    only: str


@dataclass(frozen=True)
class HealReads:
    only: str | None = None
    """Heal this text only (None: every one)."""


def _check_only(only: str) -> str:
    if not only or any(c.isspace() for c in only):
        raise ValueError(f"only={only!r} must be non-empty text without spaces")
    return only


def fail_reads_line(only: str) -> str:
    """The ``fail-reads`` request for the files whose path contains ``only``."""
    return f"fail-reads only={_check_only(only)}"


def heal_reads_line(only: str | None = None) -> str:
    """The ``heal-reads`` request (of ``only``, or of every text)."""
    return "heal-reads" if only is None else f"heal-reads only={_check_only(only)}"


def crash_line(tear: int | float | None, only: str | None = None) -> str:
    """The ``crash`` request for ``tear`` (and ``only``)."""
    if tear is None:
        if only is not None:
            raise ValueError("only= chooses the write to tear: it needs a tear")
        return "crash"
    if isinstance(tear, bool):
        raise TypeError("tear is a byte count or a fraction, not a bool")
    if only is not None and (not only or any(c.isspace() for c in only)):
        raise ValueError(f"only={only!r} must be non-empty text without spaces")
    return f"crash tear={tear!r}" + ("" if only is None else f" only={only}")


def _tear(value: str) -> int | float:
    tear: int | float
    try:
        tear = int(value)
    except ValueError:
        try:
            tear = float(value)  # "0.5", and repr's "5e-324"
        except ValueError:
            raise ValueError(f"tear={value!r} is neither bytes nor a fraction") from None
    if tear < 0 or (isinstance(tear, float) and tear > 1):
        raise ValueError(f"tear={value} is out of range (bytes >= 0, fraction 0..1)")
    return tear


def parse_command(line: str) -> Crash | Hold | Status | FailReads | HealReads:
    """The command on ``line``; ValueError with the one line to answer when it is not one."""
    words = line.split()
    if words == ["status"]:
        return Status()
    if words == ["heal-reads"]:
        return HealReads()
    if len(words) == 2 and words[0] in ("fail-reads", "heal-reads"):
        if words[1] == "only=":
            raise ValueError(f"{words[0]} only= needs the text of the paths")
        if words[1].startswith("only="):
            only = words[1].removeprefix("only=")
            return FailReads(only) if words[0] == "fail-reads" else HealReads(only)
    if len(words) == 2 and words[0] == "hold" and words[1].startswith("only="):
        if words[1] == "only=":
            raise ValueError("hold only= needs the text of the paths to hold")
        return Hold(words[1].removeprefix("only="))
    if words[:1] == ["crash"]:
        args = dict(word.partition("=")[::2] for word in words[1:])
        if len(args) == len(words) - 1 and set(args) <= {"tear", "only"}:
            if "only" in args and "tear" not in args:
                raise ValueError("only= chooses the write to tear: it needs a tear=")
            tear = _tear(args["tear"]) if "tear" in args else None
            return Crash(tear, args.get("only") or None)
    usage = (
        "crash [tear=N|tear=F [only=TEXT]], hold only=TEXT, fail-reads only=TEXT, "
        "heal-reads [only=TEXT], status"
    )
    raise ValueError(f"unknown command {line.strip()!r} ({usage})")


def format_crash(report: CrashReport[int]) -> str:
    torn = report.torn
    where = "none" if torn is None else f"{torn.key}@{torn.offset}:{len(torn.data)}/{torn.length}"
    return f"ok files={report.files} dropped={report.bytes_dropped} torn={where}"
