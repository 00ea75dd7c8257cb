"""One lazily created, process-wide local SparkSession shared by every analytics test.

Skips (``unittest.SkipTest``, which trial and pytest both honour) with a clear reason when
pyspark or Java is missing. Stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
from typing import Any
from unittest import SkipTest

_session: Any = None


def have_spark() -> str | None:
    """None when Spark can run here, else the reason it cannot."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'txdilation[analytics]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java 17+ is not installed (apt-get install openjdk-17-jre-headless)"
    return None


def spark() -> Any:
    """The shared SparkSession (local[2], the small profile: 2 shuffle partitions, quick JVM,
    no code generation)."""
    global _session
    reason = have_spark()
    if reason:
        raise SkipTest(reason)
    if _session is None:
        from txdilation_analytics.session import get_spark

        _session = get_spark(
            "local[2]",
            app_name="txdilation-analytics-tests",
            shuffle_partitions=2,
            small=True,
        )
        atexit.register(_session.stop)
    return _session
