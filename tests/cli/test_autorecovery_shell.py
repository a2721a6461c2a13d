"""``bookiesim shell listunderreplicated | whoisauditor | triggeraudit |
lostbookierecoverydelay | autorecovery`` on a cluster's metadata store.

Why: these are how an operator sees and steers auto-recovery by hand; each must read and
write upstream's records (so upstream's tools agree), print upstream's lines or ``--json``,
and refuse with one line and exit 1 (bad arguments: 2). The state comes from a second
session kept open in a thread (a volunteer's vote and a worker's lock are ephemeral: they
live only as long as that session), exactly as a running auditor and worker would leave it.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.cli.main import main
from bookiesim.cluster.in_process import TrioThread
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ensure_cluster
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from bookiesim.metadata.store import MetadataStore

LOST, OTHER, AUDITOR = "127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3999"


@asynccontextmanager
async def _cluster_store(uri: str) -> AsyncIterator[MetadataStore]:
    async with open_store(uri) as store:
        await ensure_cluster(store)
        yield store


class Session:
    """A store session in a background trio run, and its under-replication manager."""

    def __init__(self, uri: str) -> None:
        self.driver = TrioThread()
        self.store: MetadataStore = self.driver.start(lambda: _cluster_store(uri))
        self.urm = UnderReplicationManager(self.store)

    def run(self, fn: Any, *args: object) -> Any:
        return self.driver.run(fn, *args)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'metadata.db'}"


@pytest.fixture
def session(uri: str) -> Iterator[Session]:
    s = Session(uri)
    try:
        yield s
    finally:
        s.driver.stop()


def shell(
    capsys: pytest.CaptureFixture[str], uri: str, *args: str, code: int = 0
) -> tuple[str, str]:
    capsys.readouterr()
    assert main(["shell", args[0], "--metadata", uri, *args[1:]]) == code
    captured = capsys.readouterr()
    return captured.out, captured.err


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_listunderreplicated_prints_marks_filters_and_lock_owners(
    session: Session, uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    session.run(session.urm.mark_under_replicated, 3, [LOST])
    session.run(session.urm.mark_under_replicated, 7, [LOST, OTHER])
    session.run(session.urm.mark_under_replicated, 12, [OTHER])
    lock = session.run(session.urm.try_lock, 7, AUDITOR)
    assert lock is not None

    out, _ = shell(capsys, uri, "listunderreplicated")
    assert [line for line in out.splitlines() if not line.startswith("\t")] == [
        "3",
        "7",
        "12",
        "Under replicated ledger count: 3",
    ]
    assert out.count("\tCtime : ") == 3

    out, _ = shell(capsys, uri, "listunderreplicated", "-missingreplica", LOST, "-pmr", "-prw")
    assert f"\tMissingReplica : {OTHER}" in out
    assert "7\n\tCtime : " in out
    assert out.endswith(f"\tReplicationWorkerId : {AUDITOR}\nUnder replicated ledger count: 2\n")

    out, _ = shell(
        capsys, uri, "listunderreplicated", "--missingreplica", LOST, "-emr", OTHER, "--json"
    )
    objs = json_lines(out)
    assert [o.get("ledgerId") for o in objs] == [3, None]
    assert objs[-1] == {"type": "summary", "underReplicatedLedgers": 1}

    out, _ = shell(capsys, uri, "listunderreplicated", "-c")
    assert out == "Under replicated ledger count: 3\n"

    out, _ = shell(capsys, uri, "listunderreplicated", "--json", "-printreplicationworkerid")
    workers = {o["ledgerId"]: o["replicationWorkerId"] for o in json_lines(out)[:-1]}
    assert workers == {3: None, 7: AUDITOR, 12: None}


def test_whoisauditor_and_triggeraudit(
    session: Session, uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = shell(capsys, uri, "whoisauditor", code=1)
    assert err == "bookiesim shell whoisauditor: No auditor elected\n"
    _, err = shell(capsys, uri, "triggeraudit", code=1)
    assert "no auditor elected" in err
    assert len(err.splitlines()) == 1

    session.run(session.urm.volunteer, AUDITOR)
    session.run(session.urm.volunteer, OTHER)
    out, _ = shell(capsys, uri, "whoisauditor")
    assert out == f"Auditor: {AUDITOR}\n"
    out, _ = shell(capsys, uri, "whoisauditor", "--json")
    assert json.loads(out) == {"auditor": AUDITOR}

    # The elected auditor writes its delay at start; the trigger rewrites the same value,
    # which is what wakes the auditor (its watch fires on every write).
    session.run(session.urm.set_lost_bookie_recovery_delay, 7)
    path = f"{session.urm.base_path}/lostBookieRecoveryDelay"
    before = session.run(session.store.get, path)
    out, _ = shell(capsys, uri, "triggeraudit")
    assert out == f"Triggered an audit by {AUDITOR} (rewrote lostBookieRecoveryDelay, 7 s)\n"
    after = session.run(session.store.get, path)
    assert after.value == before.value == b"7"
    assert after.version > before.version

    shell(capsys, uri, "autorecovery", "-disable")
    _, err = shell(capsys, uri, "triggeraudit", code=1)
    assert "auto-recovery is disabled" in err


def test_lostbookierecoverydelay_get_set_and_refusals(
    session: Session, uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = shell(capsys, uri, "lostbookierecoverydelay", "-get", code=1)
    assert "lostBookieRecoveryDelay is not in the store" in err
    out, _ = shell(capsys, uri, "lostbookierecoverydelay", "-set", "30")
    assert out == "Successfully set LostBookieRecoveryDelay value in the store: 30\n"
    assert session.run(session.urm.get_lost_bookie_recovery_delay) == 30
    out, _ = shell(capsys, uri, "lostbookierecoverydelay", "--get")
    assert out == "LostBookieRecoveryDelay value in the store: 30\n"
    out, _ = shell(capsys, uri, "lostbookierecoverydelay", "-g", "--json")
    assert json.loads(out) == {"lostBookieRecoveryDelay": 30}

    _, err = shell(capsys, uri, "lostbookierecoverydelay", code=2)
    assert err == "bookiesim shell lostbookierecoverydelay: one and only one of -get and -set N\n"
    shell(capsys, uri, "lostbookierecoverydelay", "-get", "-set", "1", code=2)
    _, err = shell(capsys, uri, "lostbookierecoverydelay", "-set", "-5", code=1)
    assert "must be 0 or more seconds, got -5" in err
    with pytest.raises(SystemExit) as exited:
        main(["shell", "lostbookierecoverydelay", "--metadata", uri, "-set", "soon"])
    assert exited.value.code == 2
    assert "not a whole number of seconds: 'soon'" in capsys.readouterr().err


def test_autorecovery_enable_disable_status(
    session: Session, uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = shell(capsys, uri, "autorecovery")
    assert out == "Autorecovery is enabled.\n"
    out, _ = shell(capsys, uri, "autorecovery", "-disable")
    assert out == "Disabled autorecovery\n"
    assert session.run(session.urm.is_enabled) is False
    out, _ = shell(capsys, uri, "autorecovery", "-d")
    assert out == "Autorecovery already disabled. Doing nothing\n"
    out, _ = shell(capsys, uri, "autorecovery", "-status", "--json")
    assert json.loads(out) == {"enabled": False}
    out, _ = shell(capsys, uri, "autorecovery", "--enable")
    assert out == "Enabled autorecovery\n"
    assert session.run(session.urm.is_enabled) is True
    out, _ = shell(capsys, uri, "autorecovery", "-e")
    assert out == "Autorecovery already enabled. Doing nothing\n"
    with pytest.raises(SystemExit):
        main(["shell", "autorecovery", "--metadata", uri, "-e", "-d"])


def test_where_the_cluster_is_must_be_right(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = f"sqlite:///{tmp_path / 'nothing.db'}"
    _, err = shell(capsys, empty, "whoisauditor", code=1)
    assert err.startswith("bookiesim shell whoisauditor: no BookKeeper cluster at ")
    assert len(err.splitlines()) == 1

    conf = tmp_path / "bk_server.conf"
    conf.write_text("bookiePort=3181\n")
    capsys.readouterr()
    assert main(["shell", "listunderreplicated", "--conf", str(conf)]) == 2
    assert "no metadataServiceUri in it" in capsys.readouterr().err

    assert main(["shell", "listunderreplicated"]) == 2
    assert "--cluster DIR or --metadata URI" in capsys.readouterr().err

    _, err = shell(capsys, empty, "listunderreplicated", "-mr", "not an id", code=1)
    assert "not a bookie id: 'not an id'" in err


def test_conf_names_the_store(
    session: Session, uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session.run(session.urm.mark_under_replicated, 4, [LOST])
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"metadataServiceUri={uri}\n")
    capsys.readouterr()
    assert main(["shell", "listunderreplicated", "--conf", str(conf), "-c"]) == 0
    assert capsys.readouterr().out == "Under replicated ledger count: 1\n"
