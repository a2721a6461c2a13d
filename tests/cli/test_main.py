"""The ``bookiesim`` command's dispatch: every command listed with the module that adds it,
and a process that runs one command loads that command's modules only (a bookie process
started a third slower when it loaded the simulator, the chaos harness and the benchmarks)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from bookiesim.cli.main import COMMANDS, build_parser, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_module_adds_the_command_it_is_listed_for(name: str) -> None:
    subparsers = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(COMMANDS[name]).register(subparsers)
    assert list(subparsers.choices) == [name]


def test_the_full_parser_has_every_command_in_order() -> None:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(subparsers.choices) == list(COMMANDS)


def test_a_bookie_process_loads_no_other_commands_modules() -> None:
    probe = (
        "import sys; from bookiesim.cli.main import build_parser; build_parser('bookie'); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith("
        "('bookiesim.sim', 'bookiesim.chaos', 'bookiesim.bench', 'bookiesim.pipeline', "
        "'pyspark', 'pytest', 'trio.testing', 'cryptography')))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_an_unknown_command_is_named_among_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err
    assert all(f"'{name}'" in err for name in COMMANDS)
