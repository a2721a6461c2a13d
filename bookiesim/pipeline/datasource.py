"""The ``entrylog`` Spark data source (Spark 4's Python data source API).

::

    spark.dataSource.register(EntryLogDataSource)
    df = spark.read.format("entrylog").load(["/data/bookie-1", "/data/bookie-2"])

Options (all optional):

==================  ==========================================================================
``bookie``          the bookie name for every input (default: read off each path)
``maxSplitBytes``   logs bigger than this are split at record offsets (default 256 MiB)
``maxPartitionBytes`` a Spark task reads at most this much, unless one split is bigger
                    (default 1 GiB)
``problems``        ``true``: also rows for torn tails and skipped files (``status`` column)
``skipBadFiles``    ``true``: a file that is not an entry log is skipped (and, with
                    ``problems``, reported as an ``unreadable`` row) instead of failing the read
``pulsar``          ``false``: do not decode Pulsar entries (publishTime, brokerTimestamp,
                    index stay null)
``partitions``      how many Spark tasks (default 2 per CPU this process may use; the
                    jobs pass 2 per core of the Spark session); fewer for small inputs,
                    more past ``maxPartitionBytes``; splits are cut into them in order
``combine``         ``blocks``: instead of a row per entry, a row per (log, ledger, block
                    of 64 entry ids) of each batch read, pre-aggregated in the Python
                    worker (:mod:`bookiesim.pipeline.blocks`; the inventory job's input)
==================  ==========================================================================

The driver lists the files and checks their headers when the read is planned, so a bad input
fails at once with its path in the message; executors then stream their splits
(:func:`~bookiesim.pipeline.rows.read_split`). Columns: :data:`~bookiesim.pipeline.rows.SCHEMA`.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from bookiesim.pipeline.blocks import BLOCKS_SCHEMA, read_split_blocks
from bookiesim.pipeline.inputs import (
    DEFAULT_MAX_PARTITION_BYTES,
    DEFAULT_MAX_SPLIT_BYTES,
    TASKS_PER_CORE,
    Split,
    find_log_files,
    pack_splits,
    plan_splits,
)
from bookiesim.pipeline.rows import SCHEMA, read_split

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from pyspark.sql.types import StructType

__all__ = ["EntryLogDataSource", "input_paths"]

FORMAT = "entrylog"


def _flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = options.get(name, options.get(name.lower()))
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"entrylog option {name}={value!r}: expected true or false")


def _option(options: Mapping[str, str], name: str) -> str | None:
    return options.get(name, options.get(name.lower()))


def _positive(options: Mapping[str, str], name: str, default: int) -> int:
    value = _option(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"entrylog option {name}={value!r}: expected a positive integer")
    return number


def _combine_blocks(options: Mapping[str, str]) -> bool:
    value = _option(options, "combine")
    if value is None or value.lower() == "none":
        return False
    if value.lower() == "blocks":
        return True
    raise ValueError(f"entrylog option combine={value!r}: expected blocks or none")


def input_paths(options: Mapping[str, str]) -> list[str]:
    """The paths given to ``load()``: one (``path``) or several (``paths``, JSON)."""
    if (paths := _option(options, "paths")) is not None:
        loaded = json.loads(paths)
        if isinstance(loaded, list):
            return [str(p) for p in loaded]
    if (path := _option(options, "path")) is not None:
        return [path]
    raise ValueError("entrylog: say which logs to read: load(path) or load([paths])")


class SplitsPartition(InputPartition):
    """One Spark task: splits read one after the other."""

    def __init__(self, splits: list[Split]) -> None:
        super().__init__(len(splits))
        self.splits = splits


class EntryLogReaderForSpark(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.paths = input_paths(options)
        self.bookie = _option(options, "bookie")
        self.max_split_bytes = _positive(options, "maxSplitBytes", DEFAULT_MAX_SPLIT_BYTES)
        self.max_partition_bytes = _positive(
            options, "maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES
        )
        self.problems = _flag(options, "problems")
        self.skip_bad_files = _flag(options, "skipBadFiles")
        self.pulsar = _flag(options, "pulsar", default=True)
        self.blocks = _combine_blocks(options)
        cores = len(os.sched_getaffinity(0))
        self.tasks = _positive(options, "partitions", TASKS_PER_CORE * cores)

    def partitions(self) -> Sequence[InputPartition]:
        files, skipped = find_log_files(
            self.paths, bookie=self.bookie, skip_bad_files=self.skip_bad_files
        )
        splits = plan_splits(files, self.max_split_bytes)
        groups = pack_splits(splits, self.tasks, self.max_partition_bytes)
        for bad in skipped:
            groups.append([Split(str(bad.path), self.bookie or "", -1, error=str(bad))])
        if not groups:
            return [SplitsPartition([])]
        return [SplitsPartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SplitsPartition)
        read = read_split_blocks if self.blocks else read_split
        for split in partition.splits:
            yield from read(split, problems=self.problems, pulsar=self.pulsar)


class EntryLogDataSource(DataSource):
    """``spark.read.format("entrylog")``: the records of BookKeeper entry logs."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType | str:
        # Spark's own conversion: the Arrow schemas the workers fill are the only list.
        return from_arrow_schema(BLOCKS_SCHEMA if _combine_blocks(self.options) else SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        return EntryLogReaderForSpark(self.options)
