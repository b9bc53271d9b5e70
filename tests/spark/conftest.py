"""One SparkSession for the Spark tests, tuned for a small machine: local mode with two
cores and a retry per task (``local[2,2]``), no UI, two shuffle partitions."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client

from ..conftest import STORES, unavailable
from ..support import sqlstores

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from conveyor.spark import session

    if shutil.which("java") is None:
        unavailable("Java (Spark needs a Java runtime, 17 or newer)")
    # Spark's scratch files (block manager, artifacts, spark-*) in this run's temporary
    # directory: the JVM outlives `stop()` and is killed at exit, before its own cleanup
    scratch = tmp_path_factory.mktemp("spark")
    s = session(
        "local[2,2]",
        app="conveyor-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.stopTimeout": "10s",
            "spark.local.dir": str(scratch),
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={scratch}",
        },
    )
    yield s
    s.stop()
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = STORES[request.param](tmp_path)
    yield url
    sqlstores.drop(url)


@pytest.fixture
def client(store: str) -> Iterator[Client]:
    c = Client(store)
    yield c
    c.close()
