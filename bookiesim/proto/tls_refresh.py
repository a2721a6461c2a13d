"""Certificates that change while a bookie runs (upstream's ``tlsCertFilesRefreshDurationSeconds``).

Operators rotate certificates before they expire without restarting bookies: with a refresh
period set, :class:`RefreshingContext` looks at the key store, the certificate, the trust store
and the two password files at most once per period, when a connection needs a context (as
upstream's ``TLSContextFactory.getSSLContext`` does), and builds a new context if any of them
changed (modification time, size or inode: a file renamed into place counts). Connections
already up keep the context they were made with; new ones get the new certificates. Files
caught half-written, or that no longer make a context, leave the previous context in use and
are tried again at the next period (upstream logs and keeps its context too). A period of 0
(the default, upstream's) never looks again.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

    from bookiesim.proto.tls import TLSSettings

__all__ = ["RefreshingContext"]

log = logging.getLogger(__name__)

_Stamp = tuple[int, int, int] | None


def _stamp(path: str) -> _Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class RefreshingContext:
    """An :class:`ssl.SSLContext` made by ``build`` from ``settings``, made again when its
    files change (see the module docstring). ``clock`` is monotonic seconds."""

    def __init__(
        self,
        settings: TLSSettings,
        build: Callable[[TLSSettings], ssl.SSLContext],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._build = build
        self._clock = clock
        self._period = settings.cert_files_refresh_seconds
        self._paths = [
            path
            for path in (
                settings.key_store,
                settings.key_store_password_path,
                settings.certificate_path,
                settings.trust_store,
                settings.trust_store_password_path,
            )
            if path
        ]
        self._stamps = self._read_stamps()
        self._context = build(settings)
        self._checked_at = clock()
        self.reloads = 0
        """How many times the certificates were loaded again."""

    def _read_stamps(self) -> list[_Stamp]:
        return [_stamp(path) for path in self._paths]

    @property
    def context(self) -> ssl.SSLContext:
        """The context a new connection uses now."""
        if self._period > 0 and self._clock() - self._checked_at >= self._period:
            self._checked_at = self._clock()
            stamps = self._read_stamps()
            if stamps != self._stamps:
                self._reload(stamps)
        return self._context

    def _reload(self, stamps: list[_Stamp]) -> None:
        try:
            context = self._build(self._settings)
        except (OSError, ValueError) as exc:  # TLSConfigError and ssl.SSLError among them
            log.warning(
                "TLS files changed but do not make a context (the previous certificates stay "
                "in use; tried again in %d s): %s",
                self._period,
                exc,
            )
            return
        self._context = context
        self._stamps = stamps
        self.reloads += 1
        log.warning("TLS certificates loaded again: %s", ", ".join(self._paths))
