"""One local Spark session for all pipeline tests (it takes seconds to start); Spark runs on
Java, so without one they skip saying what to install (fail under ``CI=true``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.missing import need_java

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from bookiesim.pipeline.session import spark_session

    need_java()
    session = spark_session("local[2]", app_name="bookiesim tests")
    try:
        yield session
    finally:
        session.stop()
