"""The entry log's errors: bytes that are not a valid entry log, a log that is full.

In a module of their own, not compiled: the modules that raise them may be compiled
(:mod:`bookiesim.native`), and an exception class must stay an ordinary class (picklable,
subclassable by uncompiled code).
"""

from __future__ import annotations

__all__ = ["EntryLogFormatError", "EntryLogFullError"]


class EntryLogFormatError(ValueError):
    """Bytes that are not a valid entry log (or not what the caller expected at a location).

    ``offset`` is the file offset of the offending field; ``path`` is filled in by code that
    knows the file, so a command line tool can print ``FILE: offset N: what is wrong``.
    """

    def __init__(self, reason: str, *, offset: int, path: str | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"offset {self.offset}: {self.reason}"
        return f"{self.path}: {where}" if self.path is not None else where

    def with_path(self, path: str) -> EntryLogFormatError:
        """The same error, naming ``path`` (for errors raised by code that saw only bytes)."""
        return _restore_error(type(self), {**self.__dict__, "path": path})

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take keyword-only arguments, which BaseException's pickling cannot
        # replay; the pipeline ships these errors between processes.
        return _restore_error, (type(self), dict(self.__dict__))


def _restore_error(cls: type[EntryLogFormatError], state: dict[str, object]) -> EntryLogFormatError:
    err = cls.__new__(cls)
    err.__dict__.update(state)
    err.args = (str(err),)
    return err


class EntryLogFullError(Exception):
    """The entry would push the log past ``MAX_LOG_SIZE``; the caller must roll the log."""
