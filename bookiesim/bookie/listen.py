"""Opening a listening socket, with an error that names the address and the setting.

Why: trio's ``open_tcp_listeners`` fails with a bare ``OSError: [Errno 98] Address already
in use`` deep inside nurseries; an operator needs the port and the configuration key that
chose it, in one line (``bookiesim bookie`` prints it and exits with
:data:`~bookiesim.bookie.exit_codes.UNAVAILABLE`).
"""

from __future__ import annotations

import trio

__all__ = ["ListenError", "open_listeners"]


class ListenError(OSError):
    """A listening socket could not be opened; the message names host, port and key."""


async def open_listeners(host: str | None, port: int, key: str) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners(port, host=host)``; :class:`ListenError` naming ``key`` (the
    configuration key of ``port``) when the address is taken or cannot be bound."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        where = f"{host or '*'}:{port}"
        reason = exc.strerror or str(exc)
        error = ListenError(f"cannot listen on {where} ({key}): {reason}")
        error.errno = exc.errno
        raise error from exc
