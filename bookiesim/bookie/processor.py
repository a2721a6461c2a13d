"""What the bookie's server hands parsed requests to (:mod:`.server`): the bookie's
:class:`~bookiesim.bookie.handlers.RequestProcessor`, or a benchmark's stand-in.

Apart from the server so that the server can be compiled (mypyc): a compiled module's
protocol classes are not ones ``runtime_checkable`` accepts, and the server asks at run time
whether a processor serves v2 too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bookiesim.bookie.handlers import Respond
    from bookiesim.proto import BookkeeperProtocol_pb2 as pb
    from bookiesim.proto import v2
    from bookiesim.proto.v3_add import AddFields

__all__ = ["Processor", "V2Processor"]


class Processor(Protocol):
    """What the server hands parsed requests to: the bookie's
    :class:`~bookiesim.bookie.handlers.RequestProcessor`, or a benchmark's stand-in."""

    def throttle(self) -> Callable[[], Awaitable[None]] | None:
        """None while a connection may read on; else what it awaits before reading more."""
        ...

    def needs_task(self, request: pb.Request) -> bool:
        """Whether the request may wait (it then gets a task of its own)."""
        ...

    def process(self, request: pb.Request, respond: Respond) -> None:
        """Handle a request that does not wait; ``respond`` may be called later."""
        ...

    async def process_waiting(self, request: pb.Request, respond: Respond) -> None:
        """Handle a request for which :meth:`needs_task` said yes."""
        ...

    def process_add(self, frame: bytes, add: AddFields, respond: Respond) -> None:
        """Handle a plain v3 add read without a protobuf object (``add``, from ``frame``:
        :func:`~bookiesim.proto.v3_add.parse_add`), as :meth:`process` would the parsed one."""
        ...


@runtime_checkable
class V2Processor(Protocol):
    """A :class:`Processor` that serves v2 too (the bookie's does; a benchmark's stand-in
    may not, and then a v2 frame closes the connection as any bad frame does)."""

    def needs_task_v2(self, request: v2.V2Request) -> bool: ...

    def process_v2(self, request: v2.V2Request, respond: Respond) -> None: ...

    async def process_waiting_v2(self, request: v2.V2Request, respond: Respond) -> None: ...
