"""One local Spark session for all pipeline tests (it takes seconds to start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from bookiesim.pipeline.session import spark_session

    session = spark_session("local[2]", app_name="bookiesim tests")
    try:
        yield session
    finally:
        session.stop()
