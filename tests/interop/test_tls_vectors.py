"""START_TLS as upstream 4.17.4's client and bookie wrote it (``vectors/.../tls/``), held
against bookiesim's encoders and its bookie's answer, byte for byte."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.cluster.certificates import make_ca
from bookiesim.cluster.testing import bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import encode_frame
from bookiesim.proto.tls import TLS_CONTEXT_FACTORY, start_tls_request, start_tls_response
from tests.interop.vectors import tls_exchanges

if TYPE_CHECKING:
    from pathlib import Path

EXCHANGES = [(protocol, line) for protocol in ("v3", "v2") for line in tls_exchanges(protocol)]


@pytest.mark.parametrize(("protocol", "exchange"), EXCHANGES)
def test_bookiesims_encoders_write_upstreams_bytes(protocol: str, exchange: dict[str, str]) -> None:
    request = bytes.fromhex(exchange["c2b_start_tls"])
    answer = bytes.fromhex(exchange["b2c_start_tls"])
    parsed = pb.Request.FromString(request)
    assert parsed.header.operation == pb.START_TLS
    assert start_tls_request(parsed.header.txnId).SerializeToString() == request
    assert start_tls_response(parsed, pb.EOK).SerializeToString() == answer
    # TLS records follow at once, each way.
    assert exchange["c2b_next_record_type"].startswith("1603")
    assert exchange["b2c_next_record_type"].startswith("1603")


async def test_bookiesims_tls_bookie_answers_upstreams_request_with_upstreams_bytes(
    tmp_path: Path,
) -> None:
    ca = make_ca()
    cert, key = ca.issue("bookie").write(tmp_path / "certs", "bookie")
    cfg = bookie_config(tmp_path / "bookie").replace(
        tls_provider_factory_class=TLS_CONTEXT_FACTORY,
        tls_key_store_type="PEM",
        tls_key_store=str(key),
        tls_certificate_path=str(cert),
    )
    for exchange in (tls_exchanges("v3")[0], tls_exchanges("v2")[0]):
        async with running_bookie(cfg) as svc:
            address = svc.address
            assert address is not None
            stream = await trio.open_tcp_stream(address.host, address.bookie_port)
            async with stream:
                await stream.send_all(encode_frame(bytes.fromhex(exchange["c2b_start_tls"])))
                received = b""
                while len(received) < 4 or len(received) < 4 + int.from_bytes(received[:4]):
                    received += await stream.receive_some(1024)
        assert received.hex() == encode_frame(bytes.fromhex(exchange["b2c_start_tls"])).hex()
