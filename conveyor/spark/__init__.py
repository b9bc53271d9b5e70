"""Conveyor on Apache Spark: the `conveyor` data source and a session helper.

``conveyor.spark.register(spark)`` makes ``spark.read.format("conveyor")``,
``readStream``, ``write`` and ``writeStream`` available; ``session()`` builds a SparkSession
whose Python workers run this interpreter. Needs the ``[spark]`` extra (PySpark 4, pyarrow).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .options import Options, parse_options

RUNTIME_DEFAULTS = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}


def register(spark: Any) -> None:
    """Register the `conveyor` data source with a SparkSession."""
    from .source import ConveyorDataSource

    spark.dataSource.register(ConveyorDataSource)


def session(
    master: str = "local[*]",
    app: str = "conveyor",
    conf: Mapping[str, str] | None = None,
    *,
    quiet: bool = False,
    remote: str | None = None,
) -> Any:
    """A SparkSession with the `conveyor` source registered.

    Python workers run this interpreter (PYSPARK_PYTHON), so they import this Conveyor; on a
    cluster, install Conveyor on the workers or ship it with ``spark.submit.pyFiles``.
    `conf`: Spark settings over the defaults. `quiet`: Spark logs errors only, from its
    start, and draws no stage progress bars. `remote`: a Spark Connect server
    (``sc://host:15002``) instead of `master`: its Python workers must import Conveyor, and
    only settings a session may change at run time apply.
    """
    from pyspark.sql import SparkSession

    if remote is not None:
        spark = SparkSession.builder.remote(remote).getOrCreate()
        for key, value in {**RUNTIME_DEFAULTS, **(conf or {})}.items():
            spark.conf.set(key, value)
        register(spark)
        return spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.python.worker.reuse": "true",
        **RUNTIME_DEFAULTS,
    }
    if quiet:
        quiet_log = Path(__file__).with_name("log4j2-quiet.properties")
        defaults["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile={quiet_log}"
        defaults["spark.ui.showConsoleProgress"] = "false"
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["Options", "parse_options", "register", "session"]
