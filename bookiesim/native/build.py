"""``python -m bookiesim.native.build``: compile :data:`~bookiesim.native.COMPILED_MODULES`
with mypyc, in place beside their sources (``make native``; ``make`` runs it where it can).

mypyc type-checks the modules with the project's mypy settings (strict), writes a C file per
module and has setuptools build the extensions with the system's compiler, a compiler process
per core (:mod:`.parallel_compile`); the C and objects go to ``build/native``. Where there
is no compiler, or no mypy (it is a test dependency), this says so in one line and exits 3
(:data:`CANNOT_COMPILE_HERE`), and the pure modules run as before; any other failure (mypyc
refusing a module) exits 1.
``--clean`` removes the compiled modules.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import shutil
import sys
import sysconfig
import time
import tomllib
import warnings
from pathlib import Path

from bookiesim.native import _PACKAGE_ROOT, COMPILED_MODULES, GROUP

BUILD_DIR = _PACKAGE_ROOT / "build" / "native"
C_DIR = BUILD_DIR / "c"
NOT_FOLLOWED = ("numpy", "hypothesis", "pytest", "_pytest")
"""Packages no compiled module imports, reached only from inside the function bodies of those
it does import (``trio.testing`` imports ``_pytest``): mypyc has mypy keep and check every
function body, and these bodies, 8 s of a build, change no type of a compiled module (the C
is the same, byte for byte; docs/native.md). mypy's ``follow_imports = "skip"`` for them."""
CANNOT_COMPILE_HERE = 3
"""The exit code when this machine lacks what compiling needs: ``make`` goes on, pure."""


def _compiled_files() -> list[Path]:
    found: list[Path] = []
    for module in (*COMPILED_MODULES, GROUP + "__mypyc"):
        base = _PACKAGE_ROOT.joinpath(*module.split("."))
        found += [
            base.with_name(base.name + suffix)
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if base.with_name(base.name + suffix).exists()
        ]
    return found


def clean() -> int:
    for path in _compiled_files():
        path.unlink()
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    return 0


def _mypy_config() -> Path:
    """The project's mypy settings (pyproject.toml), and :data:`NOT_FOLLOWED` skipped: a
    TOML file in :data:`BUILD_DIR` (JSON's strings, lists and booleans are TOML's)."""
    project = tomllib.loads((_PACKAGE_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    settings = dict(project["tool"]["mypy"])
    skipped = [name for package in NOT_FOLLOWED for name in (package, f"{package}.*")]
    overrides = [*settings.pop("overrides", []), {"module": skipped, "follow_imports": "skip"}]
    lines = ["[tool.mypy]", *(f"{key} = {json.dumps(value)}" for key, value in settings.items())]
    for override in overrides:
        lines += ["", "[[tool.mypy.overrides]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in override.items()]
    path = BUILD_DIR / "mypy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _missing_prerequisite() -> str | None:
    try:
        import mypyc.build  # noqa: F401  (only asks whether it is there)
    except ImportError:
        return "mypy (with mypyc) is not installed: pip install 'bookiesim[test]'"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.exists():
        return f"the Python headers are missing ({include}): install python3-dev"
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        return f"no C compiler ({compiler.split()[0]} not found): install gcc"
    return None


def build() -> int:
    missing = _missing_prerequisite()
    if missing is not None:
        print(f"bookiesim: not compiled, the pure modules run: {missing}", file=sys.stderr)
        return CANNOT_COMPILE_HERE
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]  # (no stubs here)

    from bookiesim.native.parallel_compile import ParallelBuildExt, cores

    sources = [str(Path(*module.split(".")).with_suffix(".py")) for module in COMPILED_MODULES]
    started = time.monotonic()
    clean()
    config = _mypy_config()
    here = Path.cwd()
    os.chdir(_PACKAGE_ROOT)  # mypycify takes paths relative to the package root
    try:
        extensions = mypycify(
            ["--config-file", str(config), *sources],
            opt_level="3",
            group_name=GROUP,
            target_dir=str(C_DIR),
            # A C file per module, compiled side by side on every core (ParallelBuildExt),
            # not one 11 MB file on one core; the same modules in the same shared library.
            multi_file=True,
        )
        for extension in extensions:
            # mypyc writes the group's headers under the group's package directory but the
            # modules' C files at the top, which include them by their bare names.
            extension.include_dirs.append(str(C_DIR.joinpath(*GROUP.split(".")[:-1])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setuptools' notes on pyproject, not ours to act on
            setup(
                name="bookiesim-native",
                ext_modules=extensions,
                cmdclass={"build_ext": ParallelBuildExt},
                script_args=[
                    "--quiet",
                    "build_ext",
                    "--inplace",
                    "--parallel",
                    str(cores()),
                    "--build-temp",
                    str(BUILD_DIR),
                ],
            )
    finally:
        os.chdir(here)
    print(
        f"bookiesim: compiled {len(sources)} modules with mypyc in "
        f"{time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookiesim.native.build", description=__doc__)
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = parser.parse_args(argv)
    return clean() if args.clean else build()


if __name__ == "__main__":
    status = main()
    # Out without freeing mypy's objects one by one at interpreter exit, 13 s of a build
    # here; mypy's own command line leaves the same way (mypy.util.hard_exit).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
