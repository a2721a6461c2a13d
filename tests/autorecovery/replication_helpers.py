"""Helpers for the replicator and worker tests: a client on an in-process cluster, ledgers
with self-describing payloads, and the checks that every entry is on every bookie of its
write set (read from each replica directly, digest checked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.autorecovery.fragments import distribution
from bookiesim.client import BookieUnavailableError, BookKeeper, ClientConfig, DigestType
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import write_out_table
from bookiesim.entrylog.rotation import RotationReason
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    from bookiesim.client import LedgerHandle
    from bookiesim.cluster.in_process import LocalCluster
    from bookiesim.metadata.ledgers import LedgerMetadata

CLIENT_CONFIG = ClientConfig(seed=11, request_timeout=2.0, connect_timeout=1.0)
PASSWORD = b"secret"


def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"L{ledger_id}E{entry_id}:".encode() + b"x" * 40


async def write_ledger(
    bk: BookKeeper, e: int, qw: int, qa: int, n: int, *, close: bool = True
) -> LedgerHandle:
    lh = await bk.create_ledger(e, qw, qa, DigestType.CRC32C, PASSWORD)
    for i in range(n):
        await lh.add_entry(payload(lh.ledger_id, i))
    if close:
        await lh.close()
    return lh


async def missing_replicas(
    bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata
) -> list[tuple[int, str]]:
    """(entry, bookie) for every bookie of an entry's write set (per ``metadata``) that does
    not return it with a good digest and the right payload. Empty = fully replicated."""
    assert metadata.is_closed
    digest = DigestManager(ledger_id, metadata.password, DigestType(int(metadata.digest_type)))
    dist = distribution(metadata)
    out = []
    for entry_id in range(metadata.last_entry_id + 1):
        ensemble = metadata.ensemble_at(entry_id)
        for position in dist.write_set(entry_id):
            bookie = ensemble[position]
            try:
                response = await bk.pool.call(bookie, read_request(ledger_id, entry_id))
            except BookieUnavailableError:
                out.append((entry_id, bookie))
                continue
            ok = response.status == pb.EOK and response.readResponse.HasField("body")
            if ok:
                v = digest.verify(response.readResponse.body, expected_entry_id=entry_id)
                ok = v.payload == payload(ledger_id, entry_id)
            if not ok:
                out.append((entry_id, bookie))
    return out


async def replication_rotations(cluster: LocalCluster, bookie: str) -> int:
    """How many entry logs ``bookie`` rotated because a replication worker said so, once
    its sorted table is written out (a rotation asked for a ledger still in the table waits
    for that)."""
    service = cluster.service(bookie)
    await write_out_table(service)
    return service.bookie.storage.entry_logger.rotations[RotationReason.REPLICATION]
