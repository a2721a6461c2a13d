"""``tlsEnabledCipherSuites``: upstream's cipher suite names applied to an OpenSSL context.

Upstream hands the list to its engine (``SSLEngine.setEnabledCipherSuites``): Java's names,
which are the IANA ones (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``); Netty's OpenSSL engine
takes OpenSSL's names as well (``ECDHE-RSA-AES128-GCM-SHA256``). Both are accepted here: an
IANA name of a TLS 1.2 suite maps to OpenSSL's through :data:`IANA_TO_OPENSSL` (OpenSSL 3's
own table, ``openssl ciphers -stdname``: the suites with certificates, no PSK, anonymous or
DSS ones), an OpenSSL name is used as it is. A name neither knows is refused in one line.

TLS 1.3 suites (``TLS_AES_128_GCM_SHA256`` and so on) are chosen apart from the others in
OpenSSL, and Python's ``ssl`` module cannot restrict them. What can be kept of Java's meaning
is kept: a list with no TLS 1.3 suite leaves TLS 1.3 out (the maximum version becomes 1.2,
as a Java engine with no 1.3 suite enabled cannot negotiate 1.3), a list of TLS 1.3 suites
only leaves TLS 1.2 and below out; with TLS 1.3 allowed, all its suites OpenSSL enables stay
(:func:`apply_cipher_suites` says so, for a start-up warning).
"""

from __future__ import annotations

import ssl
from typing import Final

__all__ = ["IANA_TO_OPENSSL", "TLS13_SUITES", "apply_cipher_suites"]

TLS13_SUITES: Final = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
"""TLS 1.3's suites (RFC 8446 and its CCM ones): the same names in Java and OpenSSL."""

IANA_TO_OPENSSL: Final[dict[str, str]] = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8": "ECDHE-ECDSA-AES256-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM": "ECDHE-ECDSA-AES256-CCM",
    "TLS_DHE_RSA_WITH_AES_256_CCM_8": "DHE-RSA-AES256-CCM8",
    "TLS_DHE_RSA_WITH_AES_256_CCM": "DHE-RSA-AES256-CCM",
    "TLS_ECDHE_ECDSA_WITH_ARIA_256_GCM_SHA384": "ECDHE-ECDSA-ARIA256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_ARIA_256_GCM_SHA384": "ECDHE-ARIA256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_ARIA_256_GCM_SHA384": "DHE-RSA-ARIA256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8": "ECDHE-ECDSA-AES128-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM": "ECDHE-ECDSA-AES128-CCM",
    "TLS_DHE_RSA_WITH_AES_128_CCM_8": "DHE-RSA-AES128-CCM8",
    "TLS_DHE_RSA_WITH_AES_128_CCM": "DHE-RSA-AES128-CCM",
    "TLS_ECDHE_ECDSA_WITH_ARIA_128_GCM_SHA256": "ECDHE-ECDSA-ARIA128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_ARIA_128_GCM_SHA256": "ECDHE-ARIA128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_ARIA_128_GCM_SHA256": "DHE-RSA-ARIA128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CAMELLIA_256_CBC_SHA384": "ECDHE-ECDSA-CAMELLIA256-SHA384",
    "TLS_ECDHE_RSA_WITH_CAMELLIA_256_CBC_SHA384": "ECDHE-RSA-CAMELLIA256-SHA384",
    "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA256": "DHE-RSA-CAMELLIA256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CAMELLIA_128_CBC_SHA256": "ECDHE-ECDSA-CAMELLIA128-SHA256",
    "TLS_ECDHE_RSA_WITH_CAMELLIA_128_CBC_SHA256": "ECDHE-RSA-CAMELLIA128-SHA256",
    "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA256": "DHE-RSA-CAMELLIA128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA": "DHE-RSA-CAMELLIA256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA": "DHE-RSA-CAMELLIA128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_256_CCM_8": "AES256-CCM8",
    "TLS_RSA_WITH_AES_256_CCM": "AES256-CCM",
    "TLS_RSA_WITH_ARIA_256_GCM_SHA384": "ARIA256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_128_CCM_8": "AES128-CCM8",
    "TLS_RSA_WITH_AES_128_CCM": "AES128-CCM",
    "TLS_RSA_WITH_ARIA_128_GCM_SHA256": "ARIA128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA256": "CAMELLIA256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA256": "CAMELLIA128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA": "CAMELLIA256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA": "CAMELLIA128-SHA",
}
"""IANA (Java) name → OpenSSL name of each TLS 1.2 suite OpenSSL 3.0 offers with
certificates (``openssl ciphers -stdname ALL``, PSK, anonymous and DSS suites left out)."""

_KEY: Final = "tlsEnabledCipherSuites"

_LOWEST: Final = {
    ssl.TLSVersion.MINIMUM_SUPPORTED: ssl.TLSVersion.TLSv1,
    ssl.TLSVersion.MAXIMUM_SUPPORTED: ssl.TLSVersion.TLSv1_3,
}


def apply_cipher_suites(context: ssl.SSLContext, suites: tuple[str, ...]) -> str | None:
    """Limit ``context`` to ``suites`` (after ``tlsEnabledProtocols``: this only narrows).
    Returns what could not be honoured, for a warning, or None. :class:`ValueError` (one line
    naming the key) for a name neither Java's table nor OpenSSL knows, or a list that leaves
    no version ``tlsEnabledProtocols`` allows."""
    if not suites:
        return None
    offered = {c["name"] for c in context.get_ciphers()}
    tls13 = [name for name in suites if name in TLS13_SUITES]
    tls12: list[str] = []
    for name in suites:
        if name in TLS13_SUITES:
            continue
        mapped = IANA_TO_OPENSSL.get(name, name if name in offered else None)
        if mapped is None:
            raise ValueError(
                f"{_KEY}: {name!r} is not a cipher suite this OpenSSL offers (Java's names, "
                "e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, or OpenSSL's)"
            )
        tls12.append(mapped)
    low = _LOWEST.get(context.minimum_version, context.minimum_version)
    high = _LOWEST.get(context.maximum_version, context.maximum_version)
    if (not tls12 and high < ssl.TLSVersion.TLSv1_3) or (
        not tls13 and low > ssl.TLSVersion.TLSv1_2
    ):
        raise ValueError(f"{_KEY}: {', '.join(suites)} leave no version tlsEnabledProtocols allows")
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ValueError(f"{_KEY}: none of {', '.join(suites)} can be used here") from None
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    if not tls13:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        return None
    if (TLS13_SUITES & offered) - set(tls13):  # offered by OpenSSL, not listed: still offered
        return (
            f"{_KEY}: TLS 1.3 suites cannot be limited here; with TLS 1.3 allowed, all "
            "those OpenSSL enables are offered"
        )
    return None
