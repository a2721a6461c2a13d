"""The wire layer's errors: a stream or frame that is not valid.

In a module of their own, not compiled: the modules that raise them may be compiled
(:mod:`bookiesim.native`), and an exception class must stay an ordinary class (picklable,
subclassable by uncompiled code).
"""

from __future__ import annotations

__all__ = ["FrameError", "V2FrameError"]


class FrameError(ValueError):
    """The byte stream or a frame in it is not valid; the connection should be closed."""


class V2FrameError(FrameError):
    """A frame that is not a valid v2 packet; the connection should be closed."""
