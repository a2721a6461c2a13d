"""A Spark session for the pipeline, with the ``entrylog`` source registered, and a progress
bar that follows Spark's stages.

Local mode with every core (``local[*]``) unless a master is given; under ``spark-submit``
the master comes from there. Spark's Python workers run this interpreter
(``PYSPARK_PYTHON``), so they import the same ``bookiesim``; the web UI is off unless asked
for, so two jobs (or tests) never fight over port 4040; shuffles use a few partitions, not
Spark's 200, because the pipeline's aggregates are small.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession
    from rich.console import Console

__all__ = ["entrylog_tasks", "spark_session", "stage_progress"]

POLL_SECONDS = 0.25


def spark_session(
    master: str | None = "local[*]", *, app_name: str = "bookiesim", ui: bool = False
) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from bookiesim.pipeline.datasource import EntryLogDataSource

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", str(ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, 2 * (os.cpu_count() or 1))))
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(EntryLogDataSource)
    return spark


def entrylog_tasks(spark: SparkSession) -> int:
    """The ``entrylog`` source's ``partitions`` for this session: ``TASKS_PER_CORE`` per core
    Spark has (``defaultParallelism``: ``N`` for ``local[N]``, the executors' cores on a
    cluster).
    The source alone only knows the cores of the machine planning the read."""
    from bookiesim.pipeline.inputs import TASKS_PER_CORE

    return TASKS_PER_CORE * spark.sparkContext.defaultParallelism


@contextmanager
def stage_progress(spark: SparkSession, console: Console, what: str) -> Iterator[None]:
    """A rich progress bar of the tasks of Spark's active stages while the block runs
    (nothing when ``console`` is not a terminal)."""
    if not console.is_terminal:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task(what, total=None)

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                progress.update(task, completed=done, total=total)

    with progress:
        thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
