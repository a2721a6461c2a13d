"""The compiled hot path (bookiesim/native): which build a process runs, and why.

Under ``make test`` the suite runs on the compiled build where the machine can compile (CI's
can: gcc and the Python headers, ``.ci/run``), so there the build in use must be the compiled
one; the areas' tests run once more on the pure modules, under coverage.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from typing import TYPE_CHECKING

import pytest

from bookiesim import native
from bookiesim.native import build as native_build
from tests.missing import Missing, skip_missing

if TYPE_CHECKING:
    from pathlib import Path

COMPILED = Missing("the compiled hot path", "make native (gcc and the Python headers)")


def _where(module: str, *, env: dict[str, str]) -> str:
    """The file a fresh interpreter loads ``module`` from, with ``env`` added."""
    code = f"import {module} as m; print(m.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _compiled_here() -> bool:
    return native.build_in_use().startswith("compiled")


def test_make_test_runs_the_compiled_build_where_it_can() -> None:
    if not _compiled_here():
        skip_missing(COMPILED, native.build_in_use())
    for module in native.COMPILED_MODULES:
        loaded = importlib.import_module(module).__file__
        assert loaded is not None
        assert loaded.endswith(EXTENSION_SUFFIXES[0]), loaded


def test_pure_env_loads_every_module_from_its_source() -> None:
    for module in ("bookiesim.proto.frames", "bookiesim.bookie.handlers"):
        assert _where(module, env={native.PURE_ENV: "1"}).endswith(".py")
    if _compiled_here():
        assert not _where("bookiesim.proto.frames", env={native.PURE_ENV: "0"}).endswith(".py")


def test_version_says_which_build_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bookiesim", "--version"],
        env={**os.environ, native.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "bookiesim 0.1.0, pure Python (BOOKIESIM_PURE is set)"


def _fake_tree(root: Path, *, compiled: int, stale: int) -> None:
    """Sources of every compiled module under ``root``; extensions for the first
    ``compiled``, of which the last ``stale`` are older than their source."""
    for i, module in enumerate(native.COMPILED_MODULES):
        source = root.joinpath(*module.split(".")).with_suffix(".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        os.utime(source, (1000, 1000))
        if i < compiled:
            extension = source.with_name(source.stem + EXTENSION_SUFFIXES[0])
            extension.write_bytes(b"")
            when = 500 if i >= compiled - stale else 2000
            os.utime(extension, (when, when))


@pytest.mark.parametrize(
    ("compiled", "stale", "decision"),
    [
        (len(native.COMPILED_MODULES), 0, "compiled (mypyc, "),
        (0, 0, "pure Python (not compiled: `make native` compiles the hot path)"),
        (len(native.COMPILED_MODULES), 1, "pure Python (the compiled build is stale"),
        (3, 0, "pure Python (the compiled build is incomplete"),
    ],
)
def test_a_stale_or_partial_build_runs_pure_as_a_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: int, stale: int, decision: str
) -> None:
    """One module edited since the build (or missing) means every module runs pure: compiled
    modules call each other directly, so a mix would run old code beside new."""
    _fake_tree(tmp_path, compiled=compiled, stale=stale)
    monkeypatch.setattr(native, "_PACKAGE_ROOT", tmp_path)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    assert native._decide().startswith(decision)


def test_build_without_a_compiler_says_so_in_one_line_and_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert native_build.main([]) == native_build.CANNOT_COMPILE_HERE
    err = capsys.readouterr().err.strip()
    assert err == (
        "bookiesim: not compiled, the pure modules run: no C compiler "
        "(no-such-compiler-here not found): install gcc"
    )
