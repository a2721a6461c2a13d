"""A connection's security (plaintext -> upgrading -> secure; authenticated or not), sans-IO.

The rules are upstream's ``AuthHandler.ServerSideHandler`` and ``processStartTLSRequestV3``;
a stateful test drives any sequence of requests and handshake outcomes against a model of
them, and the roles a certificate carries are read as upstream's ``CertUtils`` reads them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bookiesim.bookie.connection_security import (
    AUTHZ_PLUGIN,
    TRANSITIONS,
    Authorizer,
    ConnectionSecurity,
    Event,
    Phase,
    SecurityError,
    Verdict,
    roles_of,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.tls import start_tls_request

Subject = tuple[tuple[tuple[str, str], ...], ...]


def subject(*pairs: tuple[str, str]) -> Subject:
    return tuple(((name, value),) for name, value in pairs)


def ou(value: str) -> Subject:
    return subject(
        ("organizationName", "o"), ("organizationalUnitName", value), ("commonName", "c")
    )


# --- roles ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "roles"),
    [
        ("0:writer", ["writer"]),
        ("0: writer , reader ;1:cluster", ["writer", "reader"]),
        ("1:cluster;0:admin", ["admin"]),
        ("0:a;0:b", ["b"]),  # a later code wins (a map)
        ("0:", [""]),  # Java's "".split(",") is [""]: a role that matches nothing
        ("0:,", None),  # ",".split(",") is []: no role
        ("0:a,,", ["a"]),  # trailing empty strings dropped
        ("0:,a", ["", "a"]),  # the first role is empty: refused
        ("writer", None),  # no code
        ("x:writer", None),
    ],
)
def test_roles_as_upstreams_cert_utils(value: str, roles: list[str] | None) -> None:
    assert roles_of(ou(value)) == roles


def test_the_first_ou_in_the_certificates_order_is_read() -> None:
    two = subject(("organizationalUnitName", "0:first"), ("organizationalUnitName", "0:second"))
    assert roles_of(two) == ["first"]
    assert roles_of(subject(("commonName", "0:writer"))) is None


def test_only_the_first_role_is_checked() -> None:
    authorizer = Authorizer(["reader"])
    assert authorizer.allows(ou("0:reader,writer"))
    assert not authorizer.allows(ou("0:writer,reader"))
    assert not authorizer.allows(None)
    with pytest.raises(ValueError, match="authorizedRoles names no role"):
        Authorizer([])
    with pytest.raises(ValueError, match="authorizedRoles names no role"):
        Authorizer(["a", ""])


@given(st.lists(st.text(alphabet="abc ,;:0", max_size=6), max_size=4))
def test_roles_are_trimmed_and_never_hold_a_separator(parts: list[str]) -> None:
    roles = roles_of(ou(";".join(parts)))
    if roles is not None:
        assert all(role == role.strip() and "," not in role for role in roles)


# --- the state machine ---------------------------------------------------------------------------


def _v3(operation: int, *, start_tls: bool = False, plugin: str | None = None) -> pb.Request:
    request = start_tls_request(1)
    request.header.operation = operation  # type: ignore[assignment]
    if not start_tls:
        request.ClearField("startTLSRequest")
    if plugin is not None:
        request.authRequest.authPluginName = plugin
        request.authRequest.payload = b""
    return request


def test_the_table_is_the_upgrade_and_its_two_ends() -> None:
    assert set(TRANSITIONS.items()) == {
        ((Phase.PLAINTEXT, Event.START_TLS), Phase.UPGRADING),
        ((Phase.UPGRADING, Event.HANDSHAKE_DONE), Phase.SECURE),
        ((Phase.UPGRADING, Event.HANDSHAKE_FAILED), Phase.CLOSED),
    }
    with pytest.raises(SecurityError, match="handshake failed is not allowed while plaintext"):
        ConnectionSecurity(tls=True, authorizer=None).handshake_failed()


OPERATIONS = [pb.ADD_ENTRY, pb.READ_ENTRY, pb.READ_LAC, pb.GET_BOOKIE_INFO, pb.AUTH, pb.START_TLS]


class SecurityMachine(RuleBasedStateMachine):
    """Any sequence of requests and handshakes, against a model of upstream's rules."""

    @initialize(tls=st.booleans(), authz=st.booleans())
    def start(self, tls: bool, authz: bool) -> None:
        self.security = ConnectionSecurity(
            tls=tls, authorizer=Authorizer(["writer"]) if authz else None
        )
        self.tls, self.authz = tls, authz
        self.phase = Phase.PLAINTEXT
        self.authenticated = not authz

    @precondition(lambda self: self.phase in (Phase.PLAINTEXT, Phase.SECURE))
    @rule(
        operation=st.sampled_from(OPERATIONS),
        start_tls=st.booleans(),
        plugin=st.sampled_from([None, AUTHZ_PLUGIN, "AuthDisabledPlugin"]),
    )
    def v3_request(self, operation: int, start_tls: bool, plugin: str | None) -> None:
        request = _v3(operation, start_tls=start_tls, plugin=plugin)
        verdict = self.security.v3(request)
        is_start = operation == pb.START_TLS and (self.authenticated or start_tls)
        if not self.authenticated and not is_start:
            expected = (
                Verdict.UNANSWERED
                if operation == pb.AUTH and plugin == AUTHZ_PLUGIN
                else Verdict.REFUSE
            )
        elif is_start and self.tls:
            expected = Verdict.UPGRADE if self.phase is Phase.PLAINTEXT else Verdict.NOT_SECURED
        else:
            expected = Verdict.SERVE  # START_TLS without TLS: the processor's EBADREQ
        assert verdict is expected
        if verdict is Verdict.UPGRADE:
            self.phase = Phase.UPGRADING

    @precondition(lambda self: self.phase in (Phase.PLAINTEXT, Phase.SECURE))
    @rule(kind=st.sampled_from(["add", "read", "batch", "auth-plugin", "auth-other"]))
    def v2_request(self, kind: str) -> None:
        requests: dict[str, v2.V2Request] = {
            "add": v2.AddRequest(b"k" * 20, bytes(16)),
            "read": v2.ReadRequest(1, 0),
            "batch": v2.BatchReadRequest(1, 0, 1, 1, 1),
            "auth-plugin": v2.AuthRequest(AUTHZ_PLUGIN, b""),
            "auth-other": v2.AuthRequest("other", b""),
        }
        request = requests[kind]
        expected = {
            "add": Verdict.REFUSE,
            "read": Verdict.REFUSE,
            "auth-plugin": Verdict.UNANSWERED,
        }.get(kind, Verdict.CLOSE)
        assert self.security.v2(request) is (Verdict.SERVE if self.authenticated else expected)

    @precondition(lambda self: self.phase is Phase.UPGRADING)
    @rule(role=st.sampled_from([None, "writer", "reader"]))
    def handshake_done(self, role: str | None) -> None:
        certificate = None if role is None else ou(f"0:{role}")
        must_refuse = self.security.handshake_done(certificate)
        self.phase = Phase.SECURE
        if self.authz:
            self.authenticated = role == "writer"
        assert must_refuse is not self.authenticated

    @precondition(lambda self: self.phase is Phase.UPGRADING)
    @rule()
    def handshake_failed(self) -> None:
        self.security.handshake_failed()
        self.phase = Phase.CLOSED

    @precondition(lambda self: self.phase is Phase.UPGRADING)
    @rule()
    def request_during_the_handshake_is_a_bug(self) -> None:
        with pytest.raises(SecurityError):
            self.security.v3(_v3(pb.ADD_ENTRY))

    @precondition(lambda self: self.phase is Phase.CLOSED)
    @rule()
    def nothing_happens_on_a_closed_connection(self) -> None:
        with pytest.raises(SecurityError, match="while closed"):
            self.security.handshake_done(None)

    @invariant()
    def agrees(self) -> None:
        if hasattr(self, "security"):
            self.security._check()
            assert self.security.phase is self.phase
            assert self.security.authenticated is self.authenticated


TestSecurityMachine = SecurityMachine.TestCase
