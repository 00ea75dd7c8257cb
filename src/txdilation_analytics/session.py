"""Building the SparkSession: local by default, whatever ``spark-submit`` says when under it.

Invariants: ``.master()`` is called only when a master was asked for explicitly (so that
``spark-submit --master`` wins); the driver binds to 127.0.0.1 only when the master is local
(a cluster's executors must reach the driver); Python workers run this interpreter unless
``PYSPARK_PYTHON`` is already set (spark-submit's ``spark.pyspark.python`` sets it); the web UI
is off and timestamps are UTC.

Two profiles: the *small* one (:data:`SMALL_CONF`, chosen for small inputs) starts a JVM that
compiles little (C1 only, serial GC), interprets expressions instead of generating code and
plans without adaptive execution: each of the pipeline's ~50 tiny jobs then costs a fraction
of a second instead of one or two. The default profile is Spark's own, for large inputs.

Spark's own output (the JVM's warnings and log) goes to a file when ``spark_log`` names one
(the command line's default: a temporary file, shown when the run fails), so that the
operator's terminal shows the pipeline's lines only. Under ``spark-submit`` the JVM exists
before Python starts: its output is spark-submit's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO, Any

SMALL_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""JVM options that start Spark quickly for small jobs; slower for large ones."""
LARGE_JAVA_OPTIONS = "-XX:-DontCompileHugeMethods"
"""JVM options of the default profile (driver and executors): let the JIT compile methods over
8,000 bytes of bytecode. Spark generates such methods for wide rows (the events' 40 columns,
their validation): left interpreted, validating bronze cost twice the CPU."""
FAST_START_JAVA_OPTIONS = SMALL_JAVA_OPTIONS  # the name before the small profile existed

SMALL_CONF = {
    "spark.sql.adaptive.enabled": "false",
    # tiny tables: interpreting expressions beats compiling generated code
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.default.parallelism": "2",
}
"""SQL settings of the small profile (with :data:`SMALL_JAVA_OPTIONS` and 2 partitions)."""

LARGE_CONF = {
    # 200 shuffle partitions (Spark's default), coalesced where they are small
    "spark.sql.adaptive.enabled": "true",
    # bronze is written partitioned by day: one open writer per day instead of a sort
    "spark.sql.maxConcurrentOutputFileWriters": "32",
}
"""SQL settings of the default (large) profile."""


PROFILE_KEY = "spark.txdilation.profile"
"""Where the session records its profile (``small`` or ``default``), for ``_stage.json``."""


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _is_local(master: str | None) -> bool:
    return master.startswith("local") if master else not _under_spark_submit()


def spark_conf(
    master: str | None,
    *,
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
    small: bool = False,
    fast_start: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the Spark configuration the pipeline asks for (without the master).

    :param master: the master asked for, or None (then local unless under spark-submit).
    :param driver_memory: e.g. ``"4g"``; ignored under spark-submit (set it there).
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``; when local, 2 for the small
        profile, else Spark's (200, which adaptive execution coalesces: small partitions keep
        large sorts in memory).
    :param small: the small profile (:data:`SMALL_CONF`; its JVM options only when this
        process starts the JVM, i.e. not under spark-submit).
    :param fast_start: the small profile's JVM options alone (kept for ``--fast-start``).
    :param extra: further ``key=value`` settings, applied last.
    """
    local = _is_local(master)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
    }
    conf.update(SMALL_CONF if small else LARGE_CONF)
    conf[PROFILE_KEY] = "small" if small else "default"
    if local:
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if shuffle_partitions or (small and local):
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions or 2)
    if driver_memory and not _under_spark_submit():
        conf["spark.driver.memory"] = driver_memory
    if (small or fast_start) and not _under_spark_submit():
        conf["spark.driver.extraJavaOptions"] = SMALL_JAVA_OPTIONS
    elif not small:
        if not _under_spark_submit():
            conf["spark.driver.extraJavaOptions"] = LARGE_JAVA_OPTIONS
        conf["spark.executor.extraJavaOptions"] = LARGE_JAVA_OPTIONS
    conf.update(extra or {})
    return conf


def get_spark(
    master: str | None = None,
    *,
    app_name: str = "txdilation-analytics",
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
    small: bool = False,
    fast_start: bool = False,
    extra: Mapping[str, str] | None = None,
    spark_log: IO[Any] | None = None,
) -> Any:
    """Return a SparkSession configured by :func:`spark_conf` (an existing one is reused).

    :param spark_log: an open file for the JVM's stdout and stderr when this call starts the
        JVM (None: they are this process's).
    :raises ImportError: pyspark is not installed (``pip install -e '.[analytics]'`` in a checkout).
    """
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    conf = spark_conf(
        master,
        driver_memory=driver_memory,
        shuffle_partitions=shuffle_partitions,
        small=small,
        fast_start=fast_start,
        extra=extra,
    )
    starting = SparkContext._active_spark_context is None and not _under_spark_submit()
    if spark_log is not None and starting:
        from pyspark import java_gateway

        start = SparkConf(loadDefaults=False).setAppName(app_name).setAll(list(conf.items()))
        if master:
            start.setMaster(master)
        launch: Any = java_gateway.launch_gateway
        gateway = launch(start, popen_kwargs={"stdout": spark_log, "stderr": spark_log})
        SparkContext(conf=start, gateway=gateway)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
