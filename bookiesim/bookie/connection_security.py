"""A connection's security, sans-IO: plaintext, upgrading to TLS, secure; authenticated or not.

Why a state machine of its own: upstream decides what a bookie does with each request of a
connection in two places, and both depend on the connection's past. ``AuthHandler``'s
server side lets a request through only once the connection is *authenticated* (at once with
no auth provider; with ``BookieAuthZFactory`` only after a TLS handshake whose client
certificate carries an allowed role), and refuses the rest; ``BookieRequestProcessor``
answers ``START_TLS`` and puts TLS on the same connection. :class:`ConnectionSecurity` is
that decision, with one table of legal phase changes (:data:`TRANSITIONS`); the server
(:mod:`.tls_connection`) does the I/O it asks for.

What upstream does with a request on a connection not authenticated (kept exactly):

* v3 ``START_TLS`` carrying a ``startTLSRequest``: passed on (answered, TLS begins);
* v3 ``AUTH`` naming the bookie's auth plugin: handed to the plugin, which for
  ``BookieAuthZFactory`` never answers;
* any other v3 request: a response with the request's own header and status EUA;
* v2 ADD_ENTRY and READ_ENTRY: their response with EUA; v2 AUTH naming the plugin: as v3;
  any other v2 request: the connection is closed.

And for ``START_TLS``: EBADREQ when the bookie has no TLS (the request processor's answer,
unchanged here); EOK in plaintext, then the handshake. When the handshake succeeds and the
connection is still not authenticated (a client certificate without an allowed role), the
bookie answers the ``START_TLS`` request a second time, over TLS, with EIO; a failed
handshake ends the connection. A second ``START_TLS`` on a connection already secure is
answered EBADREQ here (upstream would stack a second TLS layer, which no client can use).
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Final

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "AUTHZ_FACTORY",
    "AUTHZ_PLUGIN",
    "TRANSITIONS",
    "Authorizer",
    "ConnectionSecurity",
    "Event",
    "Phase",
    "SecurityError",
    "Verdict",
    "roles_of",
]

AUTHZ_FACTORY: Final = "org.apache.bookkeeper.tls.BookieAuthZFactory"
"""The value of ``bookieAuthProviderFactoryClass`` that turns on authorization by role."""
AUTHZ_PLUGIN: Final = "BookieAuthZFactory"
"""Its plugin name, which an AUTH request must name (upstream's ``getPluginName``)."""


class SecurityError(RuntimeError):
    """An event the connection's phase does not allow (a bug in the caller)."""


class Phase(enum.Enum):
    PLAINTEXT = "plaintext"
    UPGRADING = "upgrading"
    """START_TLS answered EOK; the handshake is under way."""
    SECURE = "secure"
    CLOSED = "closed"
    """The handshake failed: the connection ends."""


class Event(enum.Enum):
    START_TLS = "start TLS"
    HANDSHAKE_DONE = "handshake done"
    HANDSHAKE_FAILED = "handshake failed"


TRANSITIONS: Final[dict[tuple[Phase, Event], Phase]] = {
    (Phase.PLAINTEXT, Event.START_TLS): Phase.UPGRADING,
    (Phase.UPGRADING, Event.HANDSHAKE_DONE): Phase.SECURE,
    (Phase.UPGRADING, Event.HANDSHAKE_FAILED): Phase.CLOSED,
}


class Verdict(enum.Enum):
    """What the server does with one request."""

    SERVE = "serve"
    """Hand it to the request processor."""
    REFUSE = "refuse"
    """Answer EUA (v3: the request's header, no sub-message; v2: the operation's response)."""
    UPGRADE = "upgrade"
    """Answer START_TLS with EOK in plaintext, then the TLS handshake."""
    NOT_SECURED = "not secured"
    """Answer START_TLS with EBADREQ (no TLS here, or TLS already on)."""
    UNANSWERED = "unanswered"
    """An AUTH for the plugin, which does not answer (upstream's BookieAuthZFactory)."""
    CLOSE = "close"


# -- roles from a certificate (upstream's CertUtils) -------------------------------------

_OU_PART: Final = re.compile(r"([0-9]+):(.*)")
_ROLE_CODE: Final = "0"


def _java_split(text: str, separator: str) -> list[str]:
    # String.split: no separator gives the text itself; trailing empty strings are dropped.
    parts = text.split(separator)
    if len(parts) == 1:
        return parts
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def roles_of(subject: Sequence[Sequence[tuple[str, str]]]) -> list[str] | None:
    """The roles of a certificate whose subject is ``subject`` (``ssl``'s ``getpeercert()``
    form: relative names in the certificate's order), as upstream's ``CertUtils`` reads them:
    the first OU (``0:role1,role2;1:cluster``), its ``0:`` part split at commas, trimmed.
    None when there is no OU or no role part."""
    ou = next(
        (value for rdn in subject for name, value in rdn if name == "organizationalUnitName"),
        None,
    )
    if ou is None:
        return None
    codes: dict[str, str] = {}
    for part in _java_split(ou, ";"):
        match = _OU_PART.fullmatch(part)
        if match:
            codes[match.group(1).strip()] = match.group(2).strip()
    names = codes.get(_ROLE_CODE)
    if names is None:
        return None
    roles = [role.strip() for role in _java_split(names, ",")]
    return roles or None


class Authorizer:
    """Upstream's ``BookieAuthZFactory``: a connection is authenticated once its TLS
    handshake showed a client certificate whose first role is one of ``authorizedRoles``."""

    def __init__(self, allowed_roles: Iterable[str]) -> None:
        self.allowed_roles = tuple(allowed_roles)
        if not self.allowed_roles or any(not role for role in self.allowed_roles):
            raise ValueError(
                f"bookieAuthProviderFactoryClass is {AUTHZ_FACTORY} but authorizedRoles "
                "names no role"
            )

    def allows(self, subject: Sequence[Sequence[tuple[str, str]]] | None) -> bool:
        """``subject`` is None without a client certificate (refused, as upstream)."""
        if subject is None:
            return False
        roles = roles_of(subject)
        return bool(roles) and roles is not None and roles[0] in self.allowed_roles


class ConnectionSecurity:
    """One connection's phase and whether it is authenticated; see the module's doc."""

    def __init__(self, *, tls: bool, authorizer: Authorizer | None) -> None:
        self.tls = tls
        self.authorizer = authorizer
        self.phase = Phase.PLAINTEXT
        self.authenticated = authorizer is None

    def _move(self, event: Event) -> None:
        after = TRANSITIONS.get((self.phase, event))
        if after is None:
            raise SecurityError(f"{event.value} is not allowed while {self.phase.value}")
        self.phase = after

    def _start_tls(self) -> Verdict:
        if not self.tls:
            return Verdict.SERVE  # the request processor answers EBADREQ, as upstream's
        if self.phase is not Phase.PLAINTEXT:
            return Verdict.NOT_SECURED
        self._move(Event.START_TLS)
        return Verdict.UPGRADE

    def v3(self, request: pb.Request) -> Verdict:
        operation = request.header.operation
        if self.phase is Phase.UPGRADING:
            # The client may not send before the handshake (the server reads nothing then).
            raise SecurityError("a request arrived during the TLS handshake")
        if self.authenticated:
            return self._start_tls() if operation == pb.START_TLS else Verdict.SERVE
        if operation == pb.AUTH and request.HasField("authRequest"):
            if request.authRequest.authPluginName == AUTHZ_PLUGIN:
                return Verdict.UNANSWERED
            return Verdict.REFUSE
        if operation == pb.START_TLS and request.HasField("startTLSRequest"):
            return self._start_tls()
        return Verdict.REFUSE

    def v2(self, request: v2.V2Request) -> Verdict:
        if self.authenticated:
            return Verdict.SERVE
        if isinstance(request, v2.AuthRequest):
            return Verdict.UNANSWERED if request.plugin_name == AUTHZ_PLUGIN else Verdict.CLOSE
        if isinstance(request, v2.AddRequest | v2.ReadRequest):
            return Verdict.REFUSE
        return Verdict.CLOSE

    def handshake_done(self, subject: Sequence[Sequence[tuple[str, str]]] | None) -> bool:
        """The handshake succeeded with this client certificate subject (None: no
        certificate); True when the bookie must answer the START_TLS again with EIO."""
        self._move(Event.HANDSHAKE_DONE)
        if self.authorizer is not None:
            self.authenticated = self.authorizer.allows(subject)
        return not self.authenticated

    def handshake_failed(self) -> None:
        self._move(Event.HANDSHAKE_FAILED)

    def _check(self) -> None:
        """Invariants the stateful test checks after every step."""
        assert self.phase in Phase
        if self.authorizer is None:
            assert self.authenticated
        elif self.phase is not Phase.SECURE:
            assert not self.authenticated, "authenticated without a TLS handshake"
        if not self.tls:
            assert self.phase is Phase.PLAINTEXT
