"""The lazy file system's control protocol: one line in, one line out, over a Unix socket.

``crash``, ``crash tear=N`` (keep N bytes of the last unsynced write) or ``crash tear=0.5``
(keep that fraction of it) answer ``ok files=F dropped=B torn=none`` or
``ok files=F dropped=B torn=INODE@OFFSET:KEPT/LENGTH``, once the mount shows the durable
state. ``status`` answers ``ok files=F``. Anything else answers ``error WHAT``.
A Unix socket (not a signal) because a crash needs an argument and an answer: the harness
must know the crash is done before it restarts the bookie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.chaos.lazyfs.model import CrashReport

__all__ = ["Crash", "Status", "format_crash", "parse_command", "tear_argument"]


@dataclass(frozen=True)
class Crash:
    tear: int | float | None


@dataclass(frozen=True)
class Status:
    pass


def tear_argument(tear: int | float | None) -> str:
    """The ``crash`` line for ``tear``."""
    if tear is None:
        return "crash"
    if isinstance(tear, bool):
        raise TypeError("tear is a byte count or a fraction, not a bool")
    return f"crash tear={tear!r}"


def parse_command(line: str) -> Crash | Status:
    """The command on ``line``; ValueError with the one line to answer when it is not one."""
    words = line.split()
    if words == ["status"]:
        return Status()
    if words[:1] == ["crash"] and len(words) <= 2:
        if len(words) == 1:
            return Crash(None)
        key, _, value = words[1].partition("=")
        if key == "tear":
            try:
                tear: int | float = float(value) if "." in value else int(value)
            except ValueError:
                raise ValueError(f"tear={value!r} is neither bytes nor a fraction") from None
            if tear < 0 or (isinstance(tear, float) and tear > 1):
                raise ValueError(f"tear={value} is out of range (bytes >= 0, fraction 0..1)")
            return Crash(tear)
    raise ValueError(f"unknown command {line.strip()!r} (crash [tear=N|tear=F], status)")


def format_crash(report: CrashReport[int]) -> str:
    torn = report.torn
    where = "none" if torn is None else f"{torn.key}@{torn.offset}:{len(torn.data)}/{torn.length}"
    return f"ok files={report.files} dropped={report.bytes_dropped} torn={where}"
