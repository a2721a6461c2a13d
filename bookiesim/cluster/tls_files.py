"""TLS for a local cluster: a CA and certificates in ``DIR/tls/``, and the keys that use them.

``bookiesim cluster up --tls`` calls :func:`ensure_cluster_tls`: the first time it makes a
CA, one certificate for the bookies (valid for ``127.0.0.1`` and ``localhost``, where they
listen; OU ``0:bookie``, the role its own clients present: auto-recovery, re-replication) and
one for clients (OU ``0:client``, upstream's role syntax), PEM files readable by bookiesim and
by upstream's Java bookies and clients alike; later it keeps them. The bookies require a client
certificate and authorize it with upstream's ``BookieAuthZFactory`` (roles ``client`` and
``bookie``), so that a cluster made with ``--tls`` serves nothing in plaintext: TLS alone, in
upstream as here, would still serve a plaintext client. It returns the bookies' settings
(upstream's keys, recorded in ``cluster.json`` like any ``--set``) and
writes ``DIR/tls/client.conf`` with upstream's client keys, which the CLI's client commands
read for ``--cluster DIR`` (:func:`cluster_client_tls`) and upstream's client takes as is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from bookiesim.bookie.config import parse_properties
from bookiesim.bookie.connection_security import AUTHZ_FACTORY
from bookiesim.client.tls import client_tls_settings
from bookiesim.cluster.certificates import make_ca
from bookiesim.proto.tls import TLS_CONTEXT_FACTORY

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.proto.tls import TLSSettings

__all__ = ["CLIENT_CONF", "TLS_DIR", "cluster_client_tls", "ensure_cluster_tls"]

TLS_DIR: Final = "tls"
CLIENT_CONF: Final = "client.conf"
CLIENT_ROLE: Final = "client"
BOOKIE_ROLE: Final = "bookie"


def ensure_cluster_tls(root: Path) -> list[str]:
    """Make (once) the CA and certificates under ``root/tls``; the bookies' TLS settings as
    ``KEY=VALUE`` (upstream's keys, absolute paths)."""
    directory = (root / TLS_DIR).resolve()
    ca_path = directory / "ca.crt"
    if not ca_path.exists():
        ca = make_ca(f"bookiesim cluster {root.resolve().name}")
        ca.issue("bookie", organizational_unit=f"0:{BOOKIE_ROLE}").write(directory, "bookie")
        ca.issue("client", organizational_unit=f"0:{CLIENT_ROLE}").write(directory, "client")
        ca_path.write_bytes(ca.cert_pem)  # last: its presence says the rest is there
    client = {
        "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
        "clientTrustStoreType": "PEM",
        "clientTrustStore": str(ca_path),
        "tlsClientAuthentication": "true",
        "clientKeyStoreType": "PEM",
        "clientKeyStore": str(directory / "client.key"),
        "tlsCertificatePath": str(directory / "client.crt"),
    }
    (directory / CLIENT_CONF).write_text("".join(f"{k}={v}\n" for k, v in client.items()))
    return [
        f"tlsProviderFactoryClass={TLS_CONTEXT_FACTORY}",
        "tlsKeyStoreType=PEM",
        f"tlsKeyStore={directory / 'bookie.key'}",
        f"tlsCertificatePath={directory / 'bookie.crt'}",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={ca_path}",
        "tlsClientAuthentication=true",
        f"bookieAuthProviderFactoryClass={AUTHZ_FACTORY}",
        f"authorizedRoles={CLIENT_ROLE},{BOOKIE_ROLE}",
    ]


def cluster_client_tls(root: Path) -> TLSSettings | None:
    """The client's TLS settings of the cluster in ``root`` (its ``tls/client.conf``), or
    None when it was not made with ``--tls``."""
    path = root / TLS_DIR / CLIENT_CONF
    if not path.exists():
        return None
    properties = {prop.key: prop.value for prop in parse_properties(path.read_text())}
    return client_tls_settings(properties)
