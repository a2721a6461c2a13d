"""Live: upstream's ``bookkeeper shell`` and ``bookiesim shell`` print the same lines for the
same cluster, given the same ``bk_server.conf``.

Why: operators keep their scripts when they move to bookiesim; a script greps and cuts what
upstream's shell prints. Here three bookiesim bookies form a cluster in a real ZooKeeper;
upstream's shell (BOOKKEEPER_HOME) and ours run each verb with one and the same
configuration file (upstream's keys, the metadata location as upstream's shell is given it),
and the messages upstream's tools log are held against our lines: equal where the cluster
alone decides them (listbookies, listledgers, ledgermetadata, readledger), equal in shape
where they measure something that moves (bookieinfo's free bytes, simpletest's ledger ids).
Skips without an installation.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bookiesim.upstream.installation import java_command
from tests.interop.upstream_live import SHELL_TIMEOUT, Bookiesim, Root, Upstream, installation
from tests.missing import upstream_skip

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bookiesim.metadata.testing import ZooKeeperServer

pytestmark = [pytest.mark.slow, upstream_skip()]

UPSTREAM_SHELL = "org.apache.bookkeeper.bookie.BookieShell"
TOOL_LINE = re.compile(r"^(?:INFO|WARN|ERROR) (\w+) - (.*)$")
"""A line upstream's shell logs (our log4j2 pattern: ``LEVEL Class - message``)."""
TOOLS = {
    "ListBookiesCommand",
    "ListFilesOnDiscCommand",
    "ReadLogCommand",
    "FormatUtil",
    "ListLedgersCommand",
    "LedgerMetaDataCommand",
    "ReadLedgerCommand",
    "InfoCommand",
    "SimpleTestCommand",
}
"""The classes whose messages are the verbs' output (the rest is the client's own log)."""


def tool_lines(output: str) -> list[str]:
    """What upstream's verbs printed, without the log prefix; upstream's entry formatter
    writes bodies with System.out, unprefixed, and those lines are kept too."""
    found = []
    for line in output.splitlines():
        match = TOOL_LINE.match(line)
        if match is None:
            continue
        if match[1] in TOOLS:
            found.append(match[2])
    return found


def shape(lines: list[str]) -> list[str]:
    """Lines with every number replaced by ``N``: the shape a script parses."""
    return [re.sub(r"\d+(?:\.\d+)?", "N", line) for line in lines]


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, tmp_path: Path
) -> Iterator[tuple[Upstream, Path, Path]]:
    """Three bookiesim bookies in a fresh root; upstream's shell configuration for it."""
    root = Root.fresh(zookeeper_server.hosts, "shell")
    install = installation()
    assert isinstance(install, Path)
    (tmp_path / "upstream").mkdir()
    (tmp_path / "bookiesim").mkdir()
    upstream = Upstream(install, root, tmp_path / "upstream")
    ours = Bookiesim(root, tmp_path / "bookiesim")
    with ours.bookie("b1") as b1, ours.bookie("b2"), ours.bookie("b3"):
        closed = ours.write_ledger(3, 2, 2, 5)
        ours.ledger("close", str(closed))
        ours.ledger("create", "-e", "2", "-w", "2", "-a", "1", "--meta", "owner=shell")
        conf = upstream.conf("shell", 0, tmp_path / "shell")
        # Bookie b1's own directories, for the verbs that read them.
        conf_b1 = upstream.conf("b1", b1.port, b1.dirs)
        yield upstream, conf, conf_b1


def ours_says(conf: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "bookiesim", "shell", "-conf", str(conf), *args],
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"bookiesim shell {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout.splitlines()


def test_both_shells_print_the_same_lines(cluster: tuple[Upstream, Path, Path]) -> None:
    upstream, conf, conf_b1 = cluster

    def theirs(*args: str) -> list[str]:
        return theirs_with(conf, *args)

    def theirs_with(conf: Path, *args: str) -> list[str]:
        command = java_command(
            upstream.home, upstream.work, upstream.java_opts, UPSTREAM_SHELL, "-conf", str(conf)
        )
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=SHELL_TIMEOUT, check=False
        )
        assert done.returncode == 0, f"upstream shell {' '.join(args)}:\n{done.stdout[-3000:]}"
        return tool_lines(done.stdout + done.stderr)

    for verb in (["listbookies", "-rw"], ["listbookies", "-a"], ["listbookies", "-ro"]):
        mine, upstreams = ours_says(conf, *verb), theirs(*verb)
        # Upstream lists a hash set's order; ours is sorted. The header and the lines match.
        assert mine[:1] == upstreams[:1], verb
        assert sorted(mine[1:]) == sorted(upstreams[1:]), verb
    assert ours_says(conf, "listledgers") == theirs("listledgers")
    # The legacy form of the metadata location, as older bk_server.conf files give it.
    legacy = conf.with_name("legacy.conf")
    hosts, root = upstream.root.hosts, upstream.root.path
    legacy.write_text(f"zkServers={hosts}\nzkLedgersRootPath={root}\nzkTimeout=10000\n")
    assert ours_says(legacy, "listledgers") == theirs_with(legacy, "listledgers")
    assert ours_says(conf, "listledgers", "-m") == theirs("listledgers", "-m")
    ledgers = [int(line.split()[-1]) for line in ours_says(conf, "listledgers")]
    assert len(ledgers) == 2
    for ledger in ledgers:
        verb = ["ledgermetadata", "-l", str(ledger)]
        assert ours_says(conf, *verb) == theirs(*verb), verb
    closed = ledgers[0]
    verb = ["readledger", "-l", str(closed), "-fe", "1", "-le", "3"]
    assert ours_says(conf, *verb) == theirs(*verb)
    assert shape(ours_says(conf, "bookieinfo")) == shape(theirs("bookieinfo"))
    simple = ["simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "50"]
    # A bookie's files: the same paths under the same headers (upstream orders files of
    # equal times as its directory listing does, ours by name: compared as sets).
    files = ["listfilesondisc", "-txn", "-log", "-idx"]
    mine, upstreams = ours_says(conf_b1, *files), theirs_with(conf_b1, *files)
    assert [line for line in mine if line.startswith("-")] == [
        line for line in upstreams if line.startswith("-")
    ]
    assert sorted(mine) == sorted(upstreams)
    # An entry log of it, read by id, in upstream's blocks.
    # Written logs first: most are empty, made ahead of need by the bookie's preallocation.
    logs = [line for line in mine if line.endswith(".log") and Path(line).stat().st_size > 0]
    for path in logs:
        log_id = str(int(Path(path).stem, 16))
        blocks = ours_says(conf_b1, "readlog", log_id, "--upstream-output")
        if len(blocks) > 1:
            break
    assert len(blocks) > 1, "no entry log of b1 holds an entry"
    assert blocks == theirs_with(conf_b1, "readlog", log_id)
    # Less the progress lines ("I entries written"), one a second: a matter of speed.
    progress = "N entries written"
    mine = [line for line in shape(ours_says(conf, *simple)) if line != progress]
    assert mine == [line for line in shape(theirs(*simple)) if line != progress]
    assert mine == ["Ledger ID: N", "N entries written to ledger N. Last entry Id N"]
