"""Fixtures for client tests: a local cluster of real in-process bookies and a client on it.

``cluster`` starts four bookies (so an E=3 ensemble has a spare for ensemble changes) with a
SQLite metadata store under the test's ``tmp_path``; ``bk`` is a client on that store with
a fixed seed (reproducible ensembles) and a short request timeout (a dropped frame fails in
seconds, not the default ten). ``bk_wire`` is the same client once per wire protocol (v3,
and v2 as Pulsar's brokers speak it: ``useV2WireProtocol``), for the tests whose contract
must hold in both; ``wire_config`` is its config, for tests that open more clients.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.cluster.in_process import LocalCluster, running_cluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

TEST_CONFIG = ClientConfig(seed=7, request_timeout=3.0, connect_timeout=2.0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with running_cluster(tmp_path / "cluster", 4) as c:
        yield c


@pytest.fixture
async def bk(cluster: LocalCluster) -> AsyncIterator[BookKeeper]:
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as client:
        yield client


@pytest.fixture(params=["v3", "v2"])
def wire_config(request: pytest.FixtureRequest) -> ClientConfig:
    return replace(TEST_CONFIG, use_v2_wire_protocol=request.param == "v2")


@pytest.fixture
async def bk_wire(cluster: LocalCluster, wire_config: ClientConfig) -> AsyncIterator[BookKeeper]:
    async with BookKeeper(cluster.store, config=wire_config) as client:
        yield client
    # The protocol asked for is the one the bookies were spoken to in.
    v2 = sum(cluster.service(b).server.v2_connections for b in cluster.running_ids())
    assert (v2 > 0) == wire_config.use_v2_wire_protocol
