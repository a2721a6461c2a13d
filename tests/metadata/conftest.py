"""Fixtures that give every metadata test both backends: an SQLite file and a real ZooKeeper.

The ZooKeeper server is started once per session on loopback (Debian's ``zookeeper`` package
or the jar in pyspark, see :mod:`bookiesim.metadata.testing`) and each test gets its own
chroot (a store option, not part of the URI), so tests never see each other's nodes; the URI
names the ledgers root ``/ledgers`` below it, as the SQLite store's root is. Without Java or
a ZooKeeper jar the ``zk`` cases skip with the reason — except under ``CI=true``, where a
missing server is a failure: CI must prove both backends.

Session timeouts are short (2 s) so that expiry tests take seconds, not minutes — but not
shorter: on a 2-core machine shared with fsync-heavy benchmarks, a heartbeat or a ZooKeeper
ping can be late by a second, and a session that expires by accident fails the test that
relies on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.metadata.helpers import Backend, backend_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from bookiesim.metadata import MetadataStore


@pytest.fixture(params=["sqlite", "zk"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    found = backend_for(request.param, request, tmp_path)
    assert found is not None
    return found


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[MetadataStore]:
    async with backend.open() as s:
        yield s
