"""The journal's errors: bytes no writer produces, a write or sync that failed.

In a module of their own, not compiled: the modules that raise them may be compiled
(:mod:`bookiesim.native`), and an exception class must stay an ordinary class (picklable,
subclassable by uncompiled code).
"""

from __future__ import annotations

__all__ = ["JournalFailedError", "JournalFormatError"]


class JournalFormatError(ValueError):
    """Bytes that no writer produces: the bookie must not start on them.

    ``offset`` is the file offset of the offending field; ``path`` names the file when the
    error was raised while reading one.
    """

    def __init__(self, message: str, offset: int, path: str | None = None) -> None:
        self.message = message
        self.offset = offset
        self.path = path
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{message} (at file offset {offset})")

    def with_path(self, path: str) -> JournalFormatError:
        """The same error, naming the file it came from."""
        return JournalFormatError(self.message, self.offset, path)


class JournalFailedError(OSError):
    """The journal could not write or sync; nothing more is acknowledged."""
