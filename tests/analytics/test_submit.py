"""The spark-submit recipe of docs/analytics.md, run locally with ``--master local[2]``.

The code ships as a ``--py-files`` zip (no PYTHONPATH in the child), the entry point is the
package's ``__main__.py``, and spark-submit's ``--master`` must win over the pipeline's
default (it calls ``.master()`` only when ``--master`` is given to it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
from twisted.trial.unittest import SynchronousTestCase

from . import golden
from ._spark import have_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _zip_packages(path: str) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for package in ("txdilation", "txdilation_analytics"):
            root = os.path.join(SRC, package)
            for dirpath, _, files in os.walk(root):
                for name in files:
                    if name.endswith((".py", ".json", ".typed", ".j2")):
                        full = os.path.join(dirpath, name)
                        z.write(full, os.path.relpath(full, SRC))


class SparkSubmitTests(SynchronousTestCase):
    """``spark-submit --master local[2] ... __main__.py analyze`` works end to end."""

    def test_spark_submit_local(self) -> None:
        """The zipped package runs under spark-submit, which decides the master."""
        reason = have_spark()
        if reason:
            self.skipTest(reason)
        import pyspark

        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        events = os.path.join(tmp, "events.jsonl")
        golden.write_golden_log(events)
        bundle = os.path.join(tmp, "txdilation.zip")
        _zip_packages(bundle)
        out = os.path.join(tmp, "out")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
        main = os.path.join(SRC, "txdilation_analytics", "__main__.py")
        argv = [
            submit, "--master", "local[2]", "--py-files", bundle,
            "--conf", "spark.ui.enabled=false",
            "--driver-java-options", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            main, "analyze", "--events", events, "--output", out, "--shuffle-partitions", "2",
            "-q",
        ]  # fmt: skip
        proc = subprocess.run(
            argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=240, check=False
        )
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        with open(os.path.join(out, "report", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["sessions"], summary["corrupt_lines"]), (5, 5))
        with open(os.path.join(out, "bronze", "_stage.json")) as f:
            self.assertEqual(json.load(f)["master"], "local[2]")
