"""``tlsCertFilesRefreshDurationSeconds``: a context is built again when its files change,
at most once per period, never with period 0; files that do not load keep the old one."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import pytest

from bookiesim.client.tls import client_tls_settings
from bookiesim.cluster.certificates import make_ca
from bookiesim.proto.tls import TLS_CONTEXT_FACTORY, TLSConfigError, TLSSettings, server_context
from bookiesim.proto.tls_refresh import RefreshingContext

if TYPE_CHECKING:
    from pathlib import Path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _settings(tmp_path: Path, period: int) -> TLSSettings:
    cert, key = make_ca().issue("bookie").write(tmp_path, "bookie")
    return TLSSettings(
        provider_factory_class=TLS_CONTEXT_FACTORY,
        key_store_type="PEM",
        key_store=str(key),
        certificate_path=str(cert),
        cert_files_refresh_seconds=period,
    )


def _rotate(tmp_path: Path) -> None:
    """A new certificate and key in place of the old, as an operator's renewal."""
    make_ca().issue("bookie renewed").write(tmp_path, "bookie")


def test_changed_files_load_again_once_the_period_has_passed(tmp_path: Path) -> None:
    clock = Clock()
    tls = RefreshingContext(_settings(tmp_path, 10), server_context, clock=clock)
    first = tls.context
    _rotate(tmp_path)
    clock.now += 9.9
    assert tls.context is first  # not looked at before the period
    clock.now += 0.1
    second = tls.context
    assert second is not first
    assert tls.reloads == 1
    clock.now += 60
    assert tls.context is second  # unchanged since: nothing to load
    assert tls.reloads == 1


def test_period_zero_never_looks_again(tmp_path: Path) -> None:
    clock = Clock()
    tls = RefreshingContext(_settings(tmp_path, 0), server_context, clock=clock)
    first = tls.context
    _rotate(tmp_path)
    clock.now += 1e6
    assert tls.context is first
    assert tls.reloads == 0


def test_files_that_do_not_load_keep_the_old_context_until_they_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    settings = _settings(tmp_path, 5)
    tls = RefreshingContext(settings, server_context, clock=clock)
    first = tls.context
    key_pem = (tmp_path / "bookie.key").read_bytes()
    (tmp_path / "bookie.key").write_bytes(key_pem[: len(key_pem) // 2])  # caught half-written
    clock.now += 5
    assert tls.context is first
    assert "do not make a context" in caplog.text
    _rotate(tmp_path)  # the renewal completes
    clock.now += 5
    renewed = tls.context
    assert renewed is not first
    assert isinstance(renewed, ssl.SSLContext)
    assert tls.reloads == 1


def test_the_client_reads_the_period_from_upstreams_key() -> None:
    key = "tlsCertFilesRefreshDurationSeconds"
    assert client_tls_settings({key: "30"}).cert_files_refresh_seconds == 30
    assert client_tls_settings({}).cert_files_refresh_seconds == 0
    with pytest.raises(TLSConfigError, match=f"{key}: expected a whole number of seconds"):
        client_tls_settings({key: "-1"})
