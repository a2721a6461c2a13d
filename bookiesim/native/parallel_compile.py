"""A setuptools ``build_ext`` that compiles C files on every core (:mod:`.build`).

mypyc's build is one shared library with a C file per module (``multi_file``) and a small
shim extension per module. setuptools compiles an extension's C files one after another,
and its own ``--parallel`` only builds whole extensions side by side: the shared library's
files, nearly all of the work, would still take one core. Here every C file of every
extension goes to one pool of ``jobs`` compiler processes, the largest first (the last file
to start is then a small one); each extension links once its own files are compiled.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools.command.build_ext import build_ext  # type: ignore[import-untyped]


def cores() -> int:
    """The cores this process may run on (a container's limit, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not on every platform)
        return os.cpu_count() or 1


class ParallelBuildExt(build_ext):  # type: ignore[misc]  # (setuptools has no stubs)
    """``build_ext`` whose extensions build side by side (its ``parallel``), their C files
    compiled by one shared pool of ``parallel`` compiler processes."""

    def build_extensions(self) -> None:
        jobs = int(self.parallel or 1)
        compile_one_by_one = self.compiler.compile
        with ThreadPoolExecutor(jobs, thread_name_prefix="cc") as pool:

            def compile_in_pool(sources: list[str], **options: Any) -> list[str]:
                # The extension's thread waits here; the pool's threads run the compiler.
                largest_first = sorted(sources, key=os.path.getsize, reverse=True)
                started = {
                    source: pool.submit(compile_one_by_one, [source], **options)
                    for source in largest_first
                }
                # The objects in the order of the sources: the link's order is unchanged.
                return [started[source].result()[0] for source in sources]

            self.compiler.compile = compile_in_pool
            try:
                super().build_extensions()
            finally:
                self.compiler.compile = compile_one_by_one
