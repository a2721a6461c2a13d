"""The lazy file system's control protocol: one line in, one line out, over a Unix socket.

``crash``, ``crash tear=N`` (keep N bytes of the last unsynced write) or ``crash tear=0.5``
(keep that fraction of it), optionally with ``only=TEXT`` (tear the last unsynced write of
the files whose backing path contains TEXT, e.g. ``only=/journal/``) answer
``ok files=F dropped=B torn=none`` or ``ok files=F dropped=B torn=INODE@OFFSET:KEPT/LENGTH``,
once the mount shows the durable
state. ``hold only=TEXT`` makes every later fsync of the files whose path contains TEXT wait
for the crash and then fail (a power loss during the fsync: the data it would have made
durable stays unsynced); it answers ``ok``. ``status`` answers ``ok files=F held=H`` (files
with unsynced changes, fsyncs held). Anything else answers ``error WHAT``.
A Unix socket (not a signal) because a crash needs an argument and an answer: the harness
must know the crash is done before it restarts the bookie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.chaos.lazyfs.model import CrashReport

__all__ = ["Crash", "Hold", "Status", "crash_line", "format_crash", "parse_command"]


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


def parse_command(line: str) -> Crash | Hold | Status:
    """The command on ``line``; ValueError with the one line to answer when it is not one."""
    words = line.split()
    if words == ["status"]:
        return Status()
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
    usage = "crash [tear=N|tear=F [only=TEXT]], hold only=TEXT, status"
    raise ValueError(f"unknown command {line.strip()!r} ({usage})")


def format_crash(report: CrashReport[int]) -> str:
    torn = report.torn
    where = "none" if torn is None else f"{torn.key}@{torn.offset}:{len(torn.data)}/{torn.length}"
    return f"ok files={report.files} dropped={report.bytes_dropped} torn={where}"
