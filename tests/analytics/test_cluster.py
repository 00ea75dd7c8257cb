"""The pipeline on a real Spark standalone cluster, submitted as docs/analytics.md says.

The test starts a master and two workers of the installed pyspark on 127.0.0.1
(tests/analytics/_cluster.py: every process stopped at the end, even on failure), builds the
package zip with ``txdilation-analytics bundle`` and runs ``spark-submit --master
spark://127.0.0.1:PORT --py-files bundle.zip .../__main__.py analyze ...``. No PYTHONPATH
reaches the workers: their executors read the mailbox usage DB through the package's Python
data source, so they need the shipped code (the driver's PYTHONPATH names the source tree,
standing for the installed package). Once the driver starts ``sessionize`` (ingest ran tasks
on both workers), one worker is killed with its executors; Spark must re-run what was lost.

It then shows that the executors ran in the worker processes (each worker's executor of this
application, in its own work directory, finished tasks; the surviving worker's status API lists
it) and that every bronze, silver and gold table and ``summary.json`` equal those of the same
``analyze`` on local[2].
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import pytest
from twisted.trial.unittest import SynchronousTestCase

from . import golden
from ._cluster import QUICK_JVM, StandaloneCluster, driver_env, spark_bin
from ._spark import have_spark, spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
SUBMIT_TIMEOUT = 420.0
TABLES = {
    "bronze": ("events", "mailbox_nameplates", "mailbox_mailboxes", "transit_log"),
    "silver": ("events", "pings", "attempts", "generations", "sessions"),
    "gold": ("daily_sessions", "daily_attempts", "daily_losses", "daily_mailboxes",
             "daily_nameplates", "daily_transit"),
}  # fmt: skip


def close(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON documents differ (floats to 1e-9 relative: sums may add in another
    order on a cluster)."""
    if isinstance(a, float) and isinstance(b, float | int):
        return [] if math.isclose(a, b, rel_tol=1e-9) else [f"{path}: {a} != {b}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in close(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


class _Driver:
    """spark-submit in its own process group; its output collected line by line (the Python
    driver's stderr reaches spark-submit's stdout)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.lines: list[str] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout))
        finally:
            self.kill()
        for t in self._threads:
            t.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


class StandaloneClusterTests(SynchronousTestCase):
    """``analyze`` on a master and two workers, one of them killed mid-run."""

    def test_analyze_on_standalone_cluster_with_worker_loss(self) -> None:
        """Executors on both workers, a worker lost mid-run, tables equal to local[2]'s."""
        reason = have_spark()
        if reason:
            self.skipTest(reason)
        tmp = tempfile.mkdtemp(prefix="txdilation-cluster-")
        self.addCleanup(shutil.rmtree, tmp, True)
        inputs, _ = golden.write_inputs(tmp)
        args = [a for pair in inputs.items() for a in pair]

        cluster = StandaloneCluster(os.path.join(tmp, "cluster"), workers=2)
        self.addCleanup(cluster.stop)
        started = time.monotonic()
        cluster.start()
        cluster_seconds = time.monotonic() - started

        bundle = os.path.join(tmp, "txdilation-analytics.zip")
        subprocess.run(
            [sys.executable, "-m", "txdilation_analytics", "bundle", "--output", bundle],
            env=dict(os.environ, PYTHONPATH=os.path.abspath(SRC)), check=True, timeout=60,
        )  # fmt: skip
        main = os.path.abspath(os.path.join(SRC, "txdilation_analytics", "__main__.py"))
        out = os.path.join(tmp, "cluster-out")
        env = driver_env(SRC)
        driver = _Driver(
            [
                spark_bin("spark-submit"), "--master", cluster.url, "--py-files", bundle,
                "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
                "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                "--conf", "spark.sql.shuffle.partitions=4",
                "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
                "--driver-java-options", QUICK_JVM,
                main, "analyze", *args, "--output", out, "--fast-start",
            ],
            env, tmp,
        )  # fmt: skip
        self.addCleanup(driver.kill)
        victim = cluster.daemons[2]
        killed_at = None
        deadline = time.monotonic() + SUBMIT_TIMEOUT
        while driver.proc.poll() is None and time.monotonic() < deadline:
            if killed_at is None and driver.saw("sessionize: ordering events per session ..."):
                cluster.kill(victim)
                killed_at = time.monotonic()
            time.sleep(0.2)
        rc = driver.wait(deadline - time.monotonic())
        finished = time.monotonic()
        log = "\n".join(driver.lines)
        self.assertEqual(rc, 0, log[-4000:])
        self.assertIsNotNone(killed_at, "the run ended before sessionize started:\n" + log[-3000:])
        assert killed_at is not None

        master = cluster.status(cluster.master)
        (app,) = [a for a in master["completedapps"] if a["name"] == "txdilation-analytics"]
        tasks = cluster.finished_tasks(app["id"])
        self.assertTrue(all(n > 0 for n in tasks.values()), tasks)
        survivor = cluster.status(cluster.daemons[1])
        executors = survivor["executors"] + survivor["finishedexecutors"]
        self.assertIn(app["id"], {e["appid"] for e in executors})
        self.assertIn("Lost executor", log)  # the driver noticed the loss
        with open(os.path.join(out, "bronze", "_stage.json")) as f:
            self.assertEqual(json.load(f)["master"], cluster.url)

        local = os.path.join(tmp, "local-out")
        from txdilation_analytics.cli import main as cli

        spark()  # the shared local[2] session
        self.assertEqual(cli(["analyze", *args, "--output", local, "-q"]), 0)
        self._assert_same_outputs(out, local)
        sys.stdout.write(
            f"\ncluster: start {cluster_seconds:.1f} s, submit to end "
            f"{finished - driver.started:.1f} s, worker killed {killed_at - driver.started:.1f} s"
            f" in, {finished - killed_at:.1f} s from the kill to the end; tasks {tasks}\n"
        )

    def _assert_same_outputs(self, cluster_out: str, local_out: str) -> None:
        from pyspark.testing import assertDataFrameEqual

        from txdilation_analytics.pipeline import Pipeline

        s = spark()
        on_cluster, on_local = Pipeline(s, cluster_out), Pipeline(s, local_out)
        for layer, tables in TABLES.items():
            for table in tables:
                if layer == "bronze":
                    a, b = on_cluster.bronze(table), on_local.bronze(table)
                else:
                    a = s.read.parquet(os.path.join(cluster_out, layer, table))
                    b = s.read.parquet(os.path.join(local_out, layer, table))
                assertDataFrameEqual(a, b, rtol=1e-9)
                self.assertGreater(b.count(), 0, f"{layer}/{table}")
        with open(os.path.join(cluster_out, "report", "summary.json")) as f:
            summary_cluster = json.load(f)
        with open(os.path.join(local_out, "report", "summary.json")) as f:
            summary_local = json.load(f)
        self.assertEqual(close(summary_cluster, summary_local), [])
