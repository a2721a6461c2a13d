"""The lazy file system's state, without I/O: what each file's unsynced writes are, and what
a sync, a read or a power loss makes of them.

The backing directory is the disk: whatever it holds is durable. Every write and truncate
since a file's last ``fsync``/``fdatasync`` lives here only, as an overlay of extents on top
of the backing file (``FileOverlay``). A sync hands the driver a :class:`SyncPlan` that makes
the backing file equal to the logical one; a crash drops every overlay, except, when asked
to tear, a prefix of the last unsynced write, which the driver writes to the backing file as
if the power had failed in the middle of it (the rest keeps what the disk held before: for a
journal, its preallocated zeros).

Files are named by any hashable key (the driver uses its inode numbers), so the hypothesis
test drives this model against a plain reference with no file system at all.

:class:`ReadFaults` is the other fault this file system plays: the files whose path contains
a given text answer every read with EIO (a failing medium under some files), while their
writes and syncs go on, until the fault is healed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable

K = TypeVar("K", bound="Hashable")

__all__ = [
    "CrashReport",
    "FileOverlay",
    "LazyState",
    "ReadFaults",
    "SyncPlan",
    "TornWrite",
    "tear_length",
]


@dataclass
class FileOverlay:
    """One file's unsynced state over its backing file of ``durable_size`` bytes."""

    durable_size: int
    """The backing file's size when the overlay began (the last sync)."""
    size: int
    """The logical size: what ``stat`` shows now."""
    cut: int
    """The smallest size a truncate set since the last sync: backing bytes from here on are
    gone (they read as zeros unless written again), even if the file grew back."""
    extents: dict[int, bytearray] = field(default_factory=dict)
    """Unsynced data by offset, non-overlapping, all below ``size``."""
    last_write: tuple[int, int, bytes] | None = None
    """(sequence, offset, data) of this file's latest unsynced write, for a torn crash."""

    @classmethod
    def over(cls, durable_size: int) -> FileOverlay:
        return cls(durable_size=durable_size, size=durable_size, cut=durable_size)

    def write(self, offset: int, data: bytes) -> None:
        if not data:
            return
        end = offset + len(data)
        self._clear(offset, end)
        # A write that continues the extent before it (a journal's appends) extends it in
        # place, so a long run of small appends stays one extent instead of thousands.
        for start, buf in self.extents.items():
            if start + len(buf) == offset:
                buf += data
                break
        else:
            self.extents[offset] = bytearray(data)
        self.size = max(self.size, end)

    def truncate(self, size: int) -> None:
        self._clear(size, max(size, self.size))
        self.size = size
        self.cut = min(self.cut, size)

    def _clear(self, start: int, end: int) -> None:
        """Remove the overlay's bytes in [start, end), splitting extents that straddle it."""
        for offset in [o for o, b in self.extents.items() if o < end and o + len(b) > start]:
            buf = self.extents.pop(offset)
            if offset < start:
                self.extents[offset] = buf[: start - offset]
            if offset + len(buf) > end:
                self.extents[end] = buf[end - offset :]

    def read(self, offset: int, length: int, backing: Callable[[int, int], bytes]) -> bytes:
        """The logical bytes at [offset, offset+length), reading the durable ones through
        ``backing(offset, length)``."""
        end = min(offset + length, self.size)
        if end <= offset:
            return b""
        out = bytearray(end - offset)
        visible = min(end, self.cut, self.durable_size)
        if visible > offset:
            got = backing(offset, visible - offset)
            out[: len(got)] = got
        for start, buf in self.extents.items():
            lo, hi = max(start, offset), min(start + len(buf), end)
            if lo < hi:
                out[lo - offset : hi - offset] = buf[lo - start : hi - start]
        return bytes(out)

    def plan(self) -> SyncPlan:
        return SyncPlan(
            cut=self.cut if self.cut < self.durable_size else None,
            size=self.size,
            writes=sorted((o, bytes(b)) for o, b in self.extents.items()),
        )


@dataclass(frozen=True)
class SyncPlan:
    """What makes a backing file equal to its logical content, in this order: truncate to
    ``cut`` (when not None), truncate to ``size``, then write each (offset, data)."""

    cut: int | None
    size: int
    writes: list[tuple[int, bytes]]


@dataclass(frozen=True)
class TornWrite(Generic[K]):
    """The prefix of the last unsynced write that a torn crash puts on the disk."""

    key: K
    offset: int
    data: bytes
    """The prefix kept (possibly empty)."""
    length: int
    """The whole write's length."""


@dataclass(frozen=True)
class CrashReport(Generic[K]):
    files: int
    """Files that had unsynced writes or truncates."""
    bytes_dropped: int
    """Unsynced bytes forgotten (the torn prefix not counted)."""
    torn: TornWrite[K] | None


def tear_length(tear: int | float, length: int) -> int:
    """Bytes of a ``length``-byte write kept by ``tear``: an int is a byte count (clamped to
    the write), a float in [0, 1] a fraction of it."""
    if isinstance(tear, bool):
        raise TypeError("tear is a byte count or a fraction, not a bool")
    if isinstance(tear, float):
        if not 0.0 <= tear <= 1.0:
            raise ValueError(f"tear fraction {tear} is not within [0, 1]")
        return int(length * tear)
    if tear < 0:
        raise ValueError(f"tear of {tear} bytes is negative")
    return min(tear, length)


class LazyState(Generic[K]):
    """Every file's overlay, and a sequence that orders writes across files (the last
    unsynced write is the one a torn crash tears)."""

    def __init__(self) -> None:
        self._files: dict[K, FileOverlay] = {}
        self._seq = 0

    def pending(self, key: K) -> FileOverlay | None:
        return self._files.get(key)

    def files(self) -> list[K]:
        """The files with unsynced writes or truncates."""
        return list(self._files)

    def _overlay(self, key: K, durable_size: Callable[[], int]) -> FileOverlay:
        found = self._files.get(key)
        if found is None:
            found = self._files[key] = FileOverlay.over(durable_size())
        return found

    def write(self, key: K, offset: int, data: bytes, durable_size: Callable[[], int]) -> None:
        overlay = self._overlay(key, durable_size)
        overlay.write(offset, data)
        if data:
            self._seq += 1
            overlay.last_write = (self._seq, offset, bytes(data))

    def truncate(self, key: K, size: int, durable_size: Callable[[], int]) -> None:
        self._overlay(key, durable_size).truncate(size)

    def size(self, key: K, durable_size: int) -> int:
        found = self._files.get(key)
        return durable_size if found is None else found.size

    def read(
        self, key: K, offset: int, length: int, backing: Callable[[int, int], bytes]
    ) -> bytes | None:
        """The logical bytes, or None when the file has nothing unsynced (read the backing
        file as it is)."""
        found = self._files.get(key)
        return None if found is None else found.read(offset, length, backing)

    def sync(self, key: K) -> SyncPlan | None:
        """Take the file's unsynced state as a plan to apply (None: nothing to do). The
        caller applies it before answering the fsync."""
        found = self._files.pop(key, None)
        return None if found is None else found.plan()

    def forget(self, key: K) -> None:
        """The file is gone (unlinked, last handle closed): its unsynced state with it."""
        self._files.pop(key, None)

    def crash(
        self, tear: int | float | None = None, among: Callable[[K], bool] | None = None
    ) -> CrashReport[K]:
        """Forget every unsynced write and truncate. With ``tear``, the last unsynced write
        (across all files, or across the files ``among`` accepts: a journal's, say) reaches
        the disk in part, see :func:`tear_length`."""
        torn: TornWrite[K] | None = None
        if tear is not None:
            last = max(
                (
                    (o.last_write, k)
                    for k, o in self._files.items()
                    if o.last_write is not None and (among is None or among(k))
                ),
                key=lambda pair: pair[0][0],
                default=None,
            )
            if last is not None:
                (_, offset, data), key = last
                kept = data[: tear_length(tear, len(data))]
                torn = TornWrite(key=key, offset=offset, data=kept, length=len(data))
        dropped = sum(len(b) for o in self._files.values() for b in o.extents.values())
        report = CrashReport(
            files=len(self._files),
            bytes_dropped=max(0, dropped - (len(torn.data) if torn else 0)),
            torn=torn,
        )
        self._files.clear()
        return report


class ReadFaults:
    """Which files answer reads with EIO: those with a path containing one of the texts
    failed and not healed since. Only reads: the overlay above, syncs and crashes do not look
    here, so what a file holds is the same once its reads work again. A crash heals nothing
    (a bad medium stays bad across a power loss)."""

    def __init__(self) -> None:
        self._texts: set[str] = set()
        self.failed = 0
        """Reads refused since the last :meth:`heal` of every text."""

    @property
    def texts(self) -> frozenset[str]:
        return frozenset(self._texts)

    def fail(self, text: str) -> None:
        """From now on, reads of the files whose path contains ``text`` fail."""
        if not text:
            raise ValueError("the text of the paths whose reads fail must not be empty")
        self._texts.add(text)

    def heal(self, text: str | None = None) -> int:
        """Reads of those files (of every file, without ``text``) work again. Returns the
        reads refused since reads last all worked (the count restarts once no text is
        left)."""
        if text is None:
            self._texts.clear()
        else:
            self._texts.discard(text)
        failed = self.failed
        if not self._texts:
            self.failed = 0
        return failed

    def refuses(self, paths: Iterable[str]) -> bool:
        """Whether a read of the file known by ``paths`` (its links) fails; counts it."""
        if not self._texts:
            return False
        if any(text in path for path in paths for text in self._texts):
            self.failed += 1
            return True
        return False
