"""``bookiesim bench seek`` runs end to end on a small topic and reports its targets.

Why: a benchmark that breaks unnoticed records nothing; this runs it small (well under a
second) and checks that the properties read bound holds and every codec round-trips.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bookiesim.cli.main import main

if TYPE_CHECKING:
    import pytest


def test_bench_seek_small(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--entries", "30000", "--ledgers", "5", "--seeks", "20", "--holes", "500"]
    assert main(["bench", "seek", *args, "--repeats", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["source"].startswith("in-memory")
    ratios = {r["key"]: r for r in report["ratios"]}
    assert ratios["tsPropsBound"]["result"] == "PASS"
    assert ratios["idxPropsBound"]["result"] == "PASS"
    figures = report["figures"]
    assert figures["tsPropsReadsMax"]["max"] <= figures["readBound"]["min"]
    assert figures["tsFullReadsMax"]["max"] > figures["tsPropsReadsMax"]["max"]
    assert figures["ZSTDBytes"]["max"] < figures["plainBytes"]["min"]
