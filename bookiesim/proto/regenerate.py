"""Regenerate the committed ``*_pb2.py`` / ``*_pb2.pyi`` modules from the ``.proto`` sources.

The one way to rebuild them: ``python -m bookiesim.proto.regenerate``. With ``--check`` it
regenerates into a temporary directory and exits 1 if any committed module differs, which
is what the test suite runs so that a stale module cannot land.

Needs the ``test`` extra (grpcio-tools bundles protoc; mypy-protobuf writes the stubs).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent.parent
SOURCES = sorted(PROTO_DIR.glob("*.proto"))


def generated_names() -> list[str]:
    return [f"{src.stem}_pb2{ext}" for src in SOURCES for ext in (".py", ".pyi")]


def generate(out_root: Path) -> None:
    """Run protoc so that modules land in ``out_root/bookiesim/proto``."""
    (out_root / "bookiesim" / "proto").mkdir(parents=True, exist_ok=True)
    rel = [str(src.relative_to(REPO_ROOT)) for src in SOURCES]
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        # The plugin is a console script beside the interpreter; PATH may not include it.
        f"--plugin=protoc-gen-mypy={Path(sys.executable).parent / 'protoc-gen-mypy'}",
        f"--python_out={out_root}",
        f"--mypy_out={out_root}",
        *rel,
    ]
    subprocess.run(cmd, check=True, cwd=REPO_ROOT)


def stale_modules() -> list[str]:
    """Names of committed generated modules that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "bookiesim" / "proto"
        return [
            name
            for name in generated_names()
            if not (PROTO_DIR / name).exists()
            or not filecmp.cmp(fresh / name, PROTO_DIR / name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed modules are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_modules()
        if stale:
            print("stale generated modules: " + ", ".join(stale), file=sys.stderr)
            print("run: python -m bookiesim.proto.regenerate", file=sys.stderr)
            return 1
        print("generated modules are up to date")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name in generated_names():
            shutil.copyfile(Path(tmp) / "bookiesim" / "proto" / name, PROTO_DIR / name)
    print(f"regenerated {len(generated_names())} modules in {PROTO_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
