"""A Spark standalone cluster on 127.0.0.1: one master and N workers of the installed pyspark.

Each daemon is ``spark-class org.apache.spark.deploy.master.Master`` (or ``...worker.Worker``)
started in its own session (so its process group holds it, the executors it launches and
their Python workers), bound to 127.0.0.1 with its web UI on an ephemeral loopback port (the
master's REST submission server off). :meth:`StandaloneCluster.stop` ends every group (TERM,
then KILL after a bounded wait); it is registered with ``atexit`` too, so nothing outlives the
test process even when a test fails between start and stop. Every wait is bounded.

The workers' environment has no ``PYTHONPATH``: code reaches their executors only the way the
docs say (``spark-submit --py-files``).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import IO, Any

QUICK_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_bin(name: str) -> str:
    """A script of the installed pyspark (``spark-class``, ``spark-submit``)."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", name)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without PYTHONPATH and SPARK_HOME, loopback-bound."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


def driver_env(src: str) -> dict[str, str]:
    """spark-submit's environment: :func:`clean_env`, this interpreter for Python, and
    PYTHONPATH naming ``src`` for the driver alone, standing for the driver's installed
    ``txdilation`` (what ``pip install 'txdilation[analytics]'`` gives it). The workers are
    started without it, so their executors have only what is shipped (``--py-files``)."""
    return clean_env(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.path.abspath(src),
    )


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: str
    log: IO[bytes]
    work_dir: str = ""
    ui: str = ""
    url: str = ""

    def text(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) under ``root``."""

    root: str
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    daemons: list[_Daemon] = field(default_factory=list)

    @property
    def master(self) -> _Daemon:
        """The master (started first)."""
        return self.daemons[0]

    @property
    def url(self) -> str:
        """``spark://127.0.0.1:PORT``."""
        return self.master.url

    def _spawn(self, name: str, argv: list[str], work_dir: str = "") -> _Daemon:
        log_path = os.path.join(self.root, f"{name}.log")
        log = open(log_path, "wb")  # noqa: SIM115 (closed by stop())
        env = clean_env(
            SPARK_DAEMON_JAVA_OPTS=f"{QUICK_JVM} -Dspark.master.rest.enabled=false",
            SPARK_DAEMON_MEMORY="256m",
            SPARK_LOG_DIR=self.root,
        )
        proc = subprocess.Popen(
            [spark_bin("spark-class"), *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        daemon = _Daemon(name, proc, log_path, log, work_dir)
        self.daemons.append(daemon)
        return daemon

    def _await(self, daemon: _Daemon, pattern: str, deadline: float) -> re.Match[str]:
        while True:
            found = re.search(pattern, daemon.text())
            if found:
                return found
            if daemon.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{daemon.name} did not log {pattern!r}:\n{daemon.text()[-3000:]}"
                )
            time.sleep(0.2)

    def start(self, timeout: float = 120.0) -> None:
        """Start the master, then the workers; return once every worker is registered.

        :raises RuntimeError: a daemon exited or did not get there within ``timeout``.
        """
        os.makedirs(self.root, exist_ok=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        master = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
             "--webui-port", "0"],
        )  # fmt: skip
        master.url = self._await(master, r"Starting Spark master at (spark://\S+)", deadline)[1]
        master.ui = (
            "http://127.0.0.1:" + self._await(master, r"'MasterUI' on port (\d+)", deadline)[1]
        )
        for i in range(self.workers):
            work = os.path.join(self.root, f"worker{i}")
            os.makedirs(work, exist_ok=True)
            worker = self._spawn(
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                 "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                 "--work-dir", work, self.url],
                work,
            )  # fmt: skip
        for worker in self.daemons[1:]:
            port = self._await(worker, r"'WorkerUI' on port (\d+)", deadline)[1]
            worker.ui = f"http://127.0.0.1:{port}"
            self._await(worker, r"Successfully registered with master", deadline)

    def status(self, daemon: _Daemon) -> dict[str, Any]:
        """The daemon's status JSON (``/json/`` of its loopback web UI)."""
        with urllib.request.urlopen(daemon.ui + "/json/", timeout=10) as response:
            doc: dict[str, Any] = json.load(response)
        return doc

    def finished_tasks(self, app_id: str) -> dict[str, int]:
        """Per worker, the tasks its executors of ``app_id`` finished (from the executors'
        own logs in the worker's work directory)."""
        out = {}
        for worker in self.daemons[1:]:
            total = 0
            for log in glob.glob(os.path.join(worker.work_dir, app_id, "*", "stderr")):
                with open(log, encoding="utf-8", errors="replace") as f:
                    total += len(re.findall(r"Finished task \S+ in stage", f.read()))
            out[worker.name] = total
        return out

    def kill(self, daemon: _Daemon) -> None:
        """SIGKILL the daemon's whole process group (the worker, its executors and their
        Python workers), as a machine that dies."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.proc.pid, signal.SIGKILL)
        daemon.proc.wait(timeout=30)

    def stop(self, grace: float = 10.0) -> None:
        """End every daemon's process group: TERM, then KILL what is left after ``grace``."""
        for daemon in reversed(self.daemons):
            if daemon.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for daemon in self.daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):  # the group: executors too
                os.killpg(daemon.proc.pid, signal.SIGKILL)
            daemon.proc.wait(timeout=30)
            daemon.log.close()
        self.daemons.clear()
