"""Building the SparkSession: local by default, whatever ``spark-submit`` says when under it.

Invariants: ``.master()`` is called only when a master was asked for explicitly (so that
``spark-submit --master`` wins); the driver binds to 127.0.0.1 only when the master is local
(a cluster's executors must reach the driver); Python workers run this interpreter unless
``PYSPARK_PYTHON`` is already set (spark-submit's ``spark.pyspark.python`` sets it); the web UI
is off and timestamps are UTC.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

FAST_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""JVM options that start Spark quickly for small jobs (tests); slower for large ones."""


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_conf(
    master: str | None,
    *,
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
    fast_start: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the Spark configuration the pipeline asks for (without the master).

    :param master: the master asked for, or None (then local unless under spark-submit).
    :param driver_memory: e.g. ``"4g"``; ignored under spark-submit (set it there).
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``; 2 x cores when local.
    :param fast_start: add :data:`FAST_START_JAVA_OPTIONS` to the driver JVM.
    :param extra: further ``key=value`` settings, applied last.
    """
    local = master.startswith("local") if master else not _under_spark_submit()
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.sql.adaptive.enabled": "true",
    }
    if local:
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions or 2 * (os.cpu_count() or 1))
    elif shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if driver_memory and not _under_spark_submit():
        conf["spark.driver.memory"] = driver_memory
    if fast_start and not _under_spark_submit():
        conf["spark.driver.extraJavaOptions"] = FAST_START_JAVA_OPTIONS
    conf.update(extra or {})
    return conf


def get_spark(
    master: str | None = None,
    *,
    app_name: str = "txdilation-analytics",
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
    fast_start: bool = False,
    extra: Mapping[str, str] | None = None,
) -> Any:
    """Return a SparkSession configured by :func:`spark_conf` (an existing one is reused).

    :raises ImportError: pyspark is not installed (``pip install 'txdilation[analytics]'``).
    """
    if master.startswith("local") if master else not _under_spark_submit():
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = spark_conf(
        master,
        driver_memory=driver_memory,
        shuffle_partitions=shuffle_partitions,
        fast_start=fast_start,
        extra=extra,
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
