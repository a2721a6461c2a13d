"""Without root: a user who is not root is refused in one line, and the same user builds a
network and starts a fault inside an unprivileged user namespace (``userns_argv``), where
the kernel allows one. Run from root as ``nobody``, with a Python that ``nobody`` can run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bookiesim
from bookiesim.chaos.netns import userns_argv
from tests.chaos.test_netns import need_network

CHILD = """
from bookiesim.chaos.netfaults import Partition
from bookiesim.chaos.netns import LiveNetwork, missing_privilege
from bookiesim.chaos.network import TestNetwork
print(missing_privilege())
with LiveNetwork(TestNetwork.plan(["a", "b"])) as live:
    print(live.run("a", ["ip", "-br", "addr", "show", "eth0"]).split()[2])
    live.start(Partition.isolate(live.net, "b"))
    print(live.run("b", ["nft", "list", "ruleset"]).count("drop"))
"""


def as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{Path(bookiesim.__file__).parents[1]}:{site}",
    }
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def nobodys_python() -> str:
    """This Python if ``nobody`` may run it, else the system's of the same version."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for python in (sys.executable, f"/usr/bin/python{version}"):
        if os.path.exists(python) and as_nobody([python, "-c", "import trio"]).returncode == 0:
            return python
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    pytest.skip(f"user nobody cannot run a Python {version} with trio here")


def test_not_root_is_refused_in_one_line_and_a_user_namespace_suffices() -> None:
    need_network()
    if shutil.which("runuser") is None or shutil.which("unshare") is None:
        pytest.skip("runuser or unshare (util-linux) not installed")
    python = nobodys_python()
    refused = as_nobody([python, "-c", CHILD])
    assert refused.returncode != 0
    assert refused.stdout.splitlines()[0].startswith("not root (CAP_NET_ADMIN and CAP_SYS_ADMIN")
    inside = as_nobody(userns_argv([python, "-c", CHILD]))
    if inside.returncode != 0 and "unshare" in inside.stderr:
        pytest.skip(f"this kernel refuses unprivileged user namespaces: {inside.stderr.strip()}")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.splitlines() == ["None", "10.123.0.1/24", "1"]
