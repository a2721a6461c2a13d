"""``tlsEnabledCipherSuites``: Java's (IANA) names and OpenSSL's both limit the suites; what
Python's ssl cannot do for TLS 1.3 is kept to its versions, and said."""

from __future__ import annotations

import ssl

import pytest

from bookiesim.proto.tls_ciphers import IANA_TO_OPENSSL, TLS13_SUITES, apply_cipher_suites

JAVA_GCM = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"


def _server() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)


def _offered_tls12(context: ssl.SSLContext) -> set[str]:
    return {c["name"] for c in context.get_ciphers() if c["protocol"] != "TLSv1.3"}


def test_a_java_name_limits_to_its_openssl_suite_and_leaves_tls13_out() -> None:
    context = _server()
    assert apply_cipher_suites(context, (JAVA_GCM,)) is None
    assert _offered_tls12(context) == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    assert context.maximum_version is ssl.TLSVersion.TLSv1_2


def test_openssls_own_names_are_taken_as_netty_takes_them() -> None:
    context = _server()
    apply_cipher_suites(context, ("ECDHE-RSA-AES256-GCM-SHA384",))
    assert _offered_tls12(context) == {"ECDHE-RSA-AES256-GCM-SHA384"}


def test_tls13_suites_only_leave_tls12_out() -> None:
    context = _server()
    assert apply_cipher_suites(context, tuple(sorted(TLS13_SUITES))) is None
    assert context.minimum_version is ssl.TLSVersion.TLSv1_3
    caveat = apply_cipher_suites(_server(), ("TLS_AES_256_GCM_SHA384", JAVA_GCM))
    assert caveat is not None
    assert "TLS 1.3 suites cannot be limited" in caveat


def test_no_names_change_nothing() -> None:
    context = _server()
    before = (_offered_tls12(context), context.minimum_version, context.maximum_version)
    assert apply_cipher_suites(context, ()) is None
    assert (_offered_tls12(context), context.minimum_version, context.maximum_version) == before


def test_an_unknown_name_is_one_line_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"^tlsEnabledCipherSuites: 'SSL_RSA_WITH_RC4_128_MD5'"):
        apply_cipher_suites(_server(), ("SSL_RSA_WITH_RC4_128_MD5",))


def test_suites_that_leave_no_allowed_version_are_refused() -> None:
    context = _server()
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # tlsEnabledProtocols=TLSv1.3
    with pytest.raises(ValueError, match="leave no version tlsEnabledProtocols allows"):
        apply_cipher_suites(context, (JAVA_GCM,))


def test_the_table_maps_iana_names_to_openssl_names() -> None:
    assert IANA_TO_OPENSSL[JAVA_GCM] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert IANA_TO_OPENSSL["TLS_RSA_WITH_AES_128_GCM_SHA256"] == "AES128-GCM-SHA256"
    assert all(name.startswith("TLS_") and "_WITH_" in name for name in IANA_TO_OPENSSL)
    assert not TLS13_SUITES & set(IANA_TO_OPENSSL)
