"""The helper every test uses for a missing server or tool (:mod:`tests.missing`).

Why: outside CI a clone must pass with what it has, each skip naming what to install, and
the run must say how many tests were skipped for what; under ``CI=true`` the same absence is
a failure, except upstream's installation, which CI has not either.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.missing import JAVA, PROMETHEUS, UPSTREAM, ZOOKEEPER, need_tool, skip_missing, summary


def _skipped(reason: str) -> SimpleNamespace:
    return SimpleNamespace(longrepr=("tests/x.py", 3, f"Skipped: {reason}"))


def test_a_missing_server_skips_in_one_line_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        skip_missing(ZOOKEEPER, "no ZooKeeper jar found")
    assert str(skipped.value) == "ZooKeeper not installed: apt-get install zookeeper"
    with pytest.raises(pytest.skip.Exception) as skipped:
        need_tool("no-such-binary-here", PROMETHEUS)
    assert str(skipped.value) == "Prometheus not installed: apt-get install prometheus"


def test_under_ci_a_missing_server_fails_but_upstream_still_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        skip_missing(JAVA, "no java on PATH")
    assert str(failed.value) == (
        "CI=true and java is missing (no java on PATH): apt-get install openjdk-17-jre-headless"
    )
    with pytest.raises(pytest.skip.Exception):
        skip_missing(UPSTREAM)


def test_the_closing_count_groups_skips_by_what_is_missing() -> None:
    reports = [
        *(_skipped(ZOOKEEPER.reason) for _ in range(12)),
        _skipped(PROMETHEUS.reason),
        _skipped("some other reason"),
        SimpleNamespace(longrepr=None),
    ]
    assert summary(reports) == (
        "13 tests skipped for missing servers: ZooKeeper (apt-get install zookeeper) x12, "
        "Prometheus (apt-get install prometheus) x1"
    )
    assert summary([_skipped("some other reason")]) is None
